"""When a log line says it happened: the timestamps training logs carry.

Root causes are chosen by time across ranks, and lines of a multi-node log
arrive in no particular order (buffered per rank, concatenated per node), so
a line's own timestamp beats its position in the file when lines carry one.
The formats met in practice:

- ISO dates: Python logging, DeepSpeed, Megatron, Slurm (``2024-05-01 12:00:01,123``,
  ``2024-05-01T12:00:01``);
- glog, which torch's C++ side prints: ``[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607]``;
- syslog and ``journalctl``: ``Mar 21 02:07:08 node3 kernel: ...``;
- ``dmesg``: ``[1234567.890123]``, seconds since boot (comparable only with itself).

Calendar times (the first three) carry no reliable year (glog and syslog
omit it), so they are all reduced to seconds since January 1st of an
unnamed year: comparable with each other across a log, which is what
ordering needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CALENDAR = "calendar"
BOOT = "boot"

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_ISO = re.compile(r"\b(?:19|20)\d\d-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")
_GLOG = re.compile(r"\[[IWEF](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?\b")
_SYSLOG = re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d):(\d\d):(\d\d)\b")
_DMESG = re.compile(r"^\s*\[\s*(\d+\.\d+)\]")
#: Only the start of a line is searched (message text may quote other times),
#: except Slurm's "CANCELLED AT <time>", which is the event's own time.
HEAD_CHARS = 120


@dataclass(frozen=True)
class Stamp:
    """A line's time: ``seconds`` on ``clock``; ``precise`` when it has a fraction of a second."""

    clock: str
    seconds: float
    precise: bool

    def same_moment(self, other: Stamp) -> bool:
        """Within the resolution of the coarser of the two stamps."""
        if self.clock != other.clock:
            return False
        if self.precise and other.precise:
            return abs(self.seconds - other.seconds) < 1e-3
        return int(self.seconds) == int(other.seconds)


def _calendar(month: int, day: int, hh: int, mm: int, ss: int, frac: str | None) -> Stamp | None:
    if not (1 <= month <= 12 and 1 <= day <= 31 and hh < 24 and mm < 60 and ss < 61):
        return None
    seconds = ((month - 1) * 31 + day - 1) * 86400 + hh * 3600 + mm * 60 + ss
    return Stamp(CALENDAR, seconds + (float("0." + frac) if frac else 0.0), frac is not None)


def stamp_of(line: str) -> Stamp | None:
    """The timestamp ``line`` starts with (after relay prefixes), or None."""
    match = _DMESG.match(line)
    if match:
        return Stamp(BOOT, float(match.group(1)), True)
    head = line[:HEAD_CHARS]
    for pattern in (_GLOG, _ISO):
        match = pattern.search(head)
        if match:
            month, day, hh, mm, ss = (int(g) for g in match.groups()[:5])
            return _calendar(month, day, hh, mm, ss, match.group(6))
    match = _SYSLOG.search(head)
    if match:
        return _calendar(_MONTHS[match.group(1)], int(match.group(2)), int(match.group(3)),
                         int(match.group(4)), int(match.group(5)), None)
    at = line.find(" AT ")
    if at >= 0:
        match = _ISO.match(line, at + 4)
        if match:
            month, day, hh, mm, ss = (int(g) for g in match.groups()[:5])
            return _calendar(month, day, hh, mm, ss, match.group(6))
    return None
