"""The records diagnosis produces: a :class:`Diagnosis` and the events behind it.

A diagnosis names *what* failed (category), *whose fault* it is (origin) and
*what the supervisor should do* (action). The supervisor branches on
``action`` only; the rest is for people and the failure statistics.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurm_acme.diagnose.clock import Stamp

ORIGINS = ("infrastructure", "framework", "script", "unknown")
ACTIONS = ("requeue", "requeue_exclude_node", "rollback", "stop")
SOURCES = ("rule", "retrieval", "llm", "none")

#: What to do with a failure nobody recognises. A retry is cheap next to a
#: dead job waiting for a human overnight (the paper: nobody on call), and the
#: supervisor's ``max_restarts`` bounds the cost when the failure is really a
#: deterministic script bug. So unknown means "requeue, same nodes".
UNKNOWN_ACTION = "requeue"


@dataclass(frozen=True)
class Diagnosis:
    """The verdict on one failed run.

    ``category`` is ``"unknown"`` (origin ``"unknown"``, source ``"none"``,
    confidence 0, action :data:`UNKNOWN_ACTION`) when no rule fires and no
    labelled case is similar enough: an honest "don't know" instead of a guess.
    ``node`` is the culprit host when the evidence names one (the supervisor
    excludes it on ``requeue_exclude_node``).
    """

    category: str
    origin: str
    action: str
    node: str | None = None
    rule_id: str | None = None
    confidence: float = 0.0
    evidence: tuple[str, ...] = ()
    source: str = "none"

    @property
    def is_unknown(self) -> bool:
        return self.category == "unknown"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["evidence"] = list(self.evidence)
        return data

    def to_json(self) -> str:
        """One JSON object (a string) with every field; ``evidence`` is a list."""
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnosis:
        return cls(**{**data, "evidence": tuple(data.get("evidence") or ())})


def unknown_diagnosis(evidence: tuple[str, ...] = ()) -> Diagnosis:
    return Diagnosis(
        category="unknown", origin="unknown", action=UNKNOWN_ACTION,
        confidence=0.0, evidence=evidence, source="none",
    )


@dataclass(frozen=True)
class FailureEvent:
    """One log line a rule recognised, with where it came from.

    ``seq`` is the line's position in arrival order across all ranks;
    ``stamp`` the time the line itself carries, if any. The earliest event
    (by stamp where all candidates carry one, else by ``seq``) is the first
    observed failure. A multi-line rule's event sits at the first line of its
    window (``seq``, ``stamp``) and keeps the lines in ``context``.
    """

    seq: int
    rule_index: int
    line: str
    rank: int | None
    node: str | None
    stamp: Stamp | None = None
    context: tuple[str, ...] = ()

    @property
    def lines(self) -> tuple[str, ...]:
        return (*self.context, self.line)
