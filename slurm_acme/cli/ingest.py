"""``sacme ingest``: pull finished jobs from sacct into the store."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import click

from slurm_acme.cli.context import AppContext, pass_app
from slurm_acme.errors import InputError

_RELATIVE = re.compile(r"^(\d+)([smhd])$")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_since(value: str, now: datetime) -> datetime:
    """``2026-07-01``, ``2026-07-01T12:00`` (UTC unless an offset is given) or ``12h``/``7d``."""
    match = _RELATIVE.match(value.strip())
    if match:
        return now - timedelta(**{_UNIT[match.group(2)]: int(match.group(1))})
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InputError(f"--since {value!r}: expected an ISO date/time (2026-07-01T12:00) "
                         "or an age like 12h or 7d") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


@click.command("ingest")
@click.option("--since", help="Start of the sacct window (ISO time or 12h/7d). "
                              "Default: the last ingest's watermark, minus an overlap.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_app
def ingest(app: AppContext, since: str | None, as_json: bool) -> None:
    """Pull finished jobs from Slurm accounting (sacct) into the store.

    Incremental and idempotent: running it again adds no duplicates.
    """
    from rich.console import Console

    from slurm_acme.ingest.sacct import ingest_sacct
    from slurm_acme.slurm import Slurm

    now = datetime.now(timezone.utc)
    start = parse_since(since, now) if since else None
    config = app.config
    slurm = Slurm(timeout=config.slurm.command_timeout_s)
    store = app.store()
    console = Console(stderr=True)
    with console.status("sacme ingest") as status:
        result = ingest_sacct(store, slurm, cluster=config.cluster.name,
                              rules=config.cluster.name_rules, since=start, now=now,
                              progress=lambda msg: status.update(f"sacme ingest: {msg}"))
    if as_json:
        click.echo(json.dumps(result.to_json()))
    else:
        click.echo(f"ingested {result.finished} finished jobs ({result.inserted} new, "
                   f"{result.updated} updated) from sacct since "
                   f"{result.since.isoformat(timespec='seconds')}")
