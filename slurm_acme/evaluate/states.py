"""The states of an evaluation and of its trials: one vocabulary, stored as their values."""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

_S = TypeVar("_S", bound="_StoredState")


class _StoredState(str, Enum):
    """A state stored as its value; reading it back is total (unknown text -> ``UNKNOWN``)."""

    @classmethod
    def parse(cls: type[_S], text: str | None) -> _S:
        try:
            return cls(text or "")
        except ValueError:
            return cls["UNKNOWN"]


class EvalState(_StoredState):
    """An evaluation run as the store records it. Unknown stored text reads as UNKNOWN."""

    PLANNED = "PLANNED"
    SUBMITTED = "SUBMITTED"
    COMPLETED = "COMPLETED"  # every dataset has a result
    PARTIAL = "PARTIAL"  # aggregation ran; some datasets have no result
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"

    def is_terminal(self) -> bool:
        return self in (EvalState.COMPLETED, EvalState.PARTIAL, EvalState.CANCELLED)


class TrialState(_StoredState):
    """One trial, from the files its jobs left in the run dir."""

    MISSING = "MISSING"  # no inference record
    INFERRED = "INFERRED"  # inference done, not scored
    SCORED = "SCORED"
    FAILED = "FAILED"  # a step failed and left a note
    UNKNOWN = "UNKNOWN"

    def is_terminal(self) -> bool:
        return self in (TrialState.SCORED, TrialState.FAILED)
