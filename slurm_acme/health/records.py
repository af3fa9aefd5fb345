"""What a health check produces: one result per test, evidence per node, one report.

These records are the contract with the in-job supervisor and with
``sacme healthcheck --json``; they are frozen so a report cannot change after
the verdicts are drawn from it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

#: ``TestResult.error`` of a test that did not finish before the hard timeout.
TIMEOUT = "timeout"


@dataclass(frozen=True)
class TestResult:
    """The outcome of one collective test over a group of nodes.

    ``passed`` already includes the bandwidth threshold when one was set;
    ``error`` says why a test failed (an exception's last line, ``"timeout"``,
    or ``"busbw X below min Y"``).
    """

    __test__ = False  # not a pytest test class

    group: tuple[str, ...]
    passed: bool
    error: str | None = None
    busbw_gbps: float | None = None
    duration_s: float = 0.0


@dataclass(frozen=True)
class Evidence:
    """One observation that led to a verdict: a pre-check or a collective test."""

    nodes: tuple[str, ...]
    test: str
    round: int
    passed: bool
    error: str | None = None
    busbw_gbps: float | None = None
    duration_s: float = 0.0

    @classmethod
    def from_result(cls, result: TestResult, test: str, round_no: int) -> Evidence:
        return cls(nodes=result.group, test=test, round=round_no, passed=result.passed,
                   error=result.error, busbw_gbps=result.busbw_gbps,
                   duration_s=round(result.duration_s, 3))


@dataclass(frozen=True)
class HealthReport:
    """Verdicts of one health check.

    ``rounds`` counts rounds of concurrent collective tests (pre-checks are
    round 0 and not counted); ``tests`` counts collective tests run.
    ``fallback_single_node`` is true when no group passed round 1, so round 2
    tested each node alone instead of re-pairing.
    """

    bad_nodes: tuple[str, ...]
    good_nodes: tuple[str, ...]
    rounds: int
    tests: int
    evidence: tuple[Evidence, ...] = field(default=())
    fallback_single_node: bool = False
    backend: str = ""
    #: One line per thing the reader should know: a pre-check not available
    #: here, a node that did not answer, the single-node fallback.
    notes: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.bad_nodes

    def evidence_for(self, node: str) -> tuple[Evidence, ...]:
        """Every observation that involved ``node``, in the order they were made."""
        return tuple(e for e in self.evidence if node in e.nodes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=False)
