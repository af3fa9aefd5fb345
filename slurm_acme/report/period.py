"""Which stretch of time a report covers: ``--month`` or ``--since/--until``.

Bounds are UTC. A month is ``[first day 00:00, first day of the next month
00:00)``; ``--since`` is inclusive and ``--until`` exclusive. Jobs belong to
the period their *submit* time falls in (see :class:`JobFilter`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

from slurm_acme.errors import InputError

_MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


@dataclass(frozen=True)
class Period:
    since_ts: float | None
    until_ts: float | None
    label: str


def _utc(dt: datetime) -> float:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def month_period(text: str) -> Period:
    """``2023-07`` -> the whole of July 2023, UTC."""
    match = _MONTH.match(text.strip())
    if not match:
        raise InputError(f"--month {text!r} is not YYYY-MM (e.g. 2023-07)")
    year, month = int(match.group(1)), int(match.group(2))
    start = datetime(year, month, 1, tzinfo=timezone.utc)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=timezone.utc)
    return Period(start.timestamp(), end.timestamp(), text.strip())


def parse_instant(text: str, flag: str) -> float:
    """An ISO date or date-time (naive means UTC), e.g. ``2023-07-01`` or
    ``2023-07-01T08:00:00+08:00``."""
    try:
        return _utc(datetime.fromisoformat(text.strip()))
    except ValueError:
        raise InputError(f"{flag} {text!r} is not an ISO date or date-time (e.g. 2023-07-01)") from None


def resolve_period(month: str | None, since: str | None, until: str | None) -> Period:
    """The period the flags ask for; no flags means all time."""
    if month is not None:
        if since is not None or until is not None:
            raise InputError("--month cannot be combined with --since/--until")
        return month_period(month)
    since_ts = parse_instant(since, "--since") if since is not None else None
    until_ts = parse_instant(until, "--until") if until is not None else None
    if since_ts is not None and until_ts is not None and until_ts <= since_ts:
        raise InputError(f"--until {until!r} is not after --since {since!r}")
    if since is None and until is None:
        return Period(None, None, "all time")
    return Period(since_ts, until_ts, f"{since or 'start'} .. {until or 'now'}")
