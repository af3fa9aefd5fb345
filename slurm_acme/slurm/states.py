"""One vocabulary for job states, whatever form Slurm prints them in.

The one owner of what "terminal" and "failed" mean for a Slurm job: the
report's SQL (``store/report.py``) and every caller ask :class:`JobState`.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any


class JobState(str, Enum):
    """Base job states of Slurm; anything unrecognised maps to ``UNKNOWN``."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    CONFIGURING = "CONFIGURING"
    REQUEUED = "REQUEUED"
    RESIZING = "RESIZING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REVOKED = "REVOKED"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def parse(cls, raw: Any) -> JobState:
        """Total mapping from any Slurm rendering of a state.

        Accepts ``"CANCELLED by 0"``, ``"CANCELLED+"``, short codes (``"CA"``),
        lowercase, and JSON lists such as ``["FAILED"]`` or
        ``["PENDING", "REQUEUED"]`` (base state first, flags after).
        """
        if isinstance(raw, (list, tuple)):
            states = [cls.parse(item) for item in raw]
            known = [s for s in states if s is not cls.UNKNOWN]
            return known[0] if known else cls.UNKNOWN
        if not isinstance(raw, str):
            return cls.UNKNOWN
        word = re.split(r"[\s+,()]", raw.strip().upper(), maxsplit=1)[0]
        word = _SHORT.get(word, word)
        return cls.__members__.get(word, cls.UNKNOWN)

    def is_terminal(self) -> bool:
        """True once the job will not run again without someone resubmitting it."""
        return self in _TERMINAL

    def is_failed(self) -> bool:
        """True for the states the paper counts as failures.

        AcmeTrace counts FAILED, TIMEOUT and NODE_FAIL; so do the other ways a
        job ends unfinished for a reason of its own or of its nodes: out of
        memory, a node that failed to boot, and a DEADLINE reached (a time
        limit, as TIMEOUT). CANCELLED and PREEMPTED are somebody's decision.
        """
        return self in _FAILED

    @classmethod
    def failed_states(cls) -> tuple[str, ...]:
        """The names of :meth:`is_failed` states, sorted (for a query's ``IN``)."""
        return tuple(sorted(s.value for s in _FAILED))


_TERMINAL = frozenset({
    JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED, JobState.TIMEOUT,
    JobState.NODE_FAIL, JobState.PREEMPTED, JobState.BOOT_FAIL, JobState.DEADLINE,
    JobState.OUT_OF_MEMORY, JobState.REVOKED,
})
_FAILED = frozenset({
    JobState.FAILED, JobState.TIMEOUT, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY,
    JobState.BOOT_FAIL, JobState.DEADLINE,
})
_SHORT = {
    "PD": "PENDING", "R": "RUNNING", "S": "SUSPENDED", "CG": "COMPLETING",
    "CF": "CONFIGURING", "RQ": "REQUEUED", "RS": "RESIZING", "CD": "COMPLETED",
    "CA": "CANCELLED", "F": "FAILED", "TO": "TIMEOUT", "NF": "NODE_FAIL",
    "PR": "PREEMPTED", "BF": "BOOT_FAIL", "DL": "DEADLINE", "OOM": "OUT_OF_MEMORY",
    "RV": "REVOKED",
}
