"""The supervisor's boundary to its sibling packages: diagnosis, health check, checkpoints.

Each function here calls the real package (``slurm_acme.diagnose``,
``slurm_acme.health``, ``slurm_acme.ckpt``) and turns its answer into the
small frozen records the restart policy reads, so the policy and the
supervisor can be unit-tested with fakes at exactly this boundary.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Finding:
    """What the diagnoser concluded about a failed attempt."""

    category: str
    origin: str  # infrastructure | framework | script | unknown
    action: str  # requeue | requeue_exclude_node | rollback | stop
    node: str | None = None
    rule_id: str | None = None
    confidence: float | None = None
    evidence: tuple[str, ...] = ()
    source: str = "rule"

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category, "origin": self.origin, "action": self.action,
                "node": self.node, "rule_id": self.rule_id, "confidence": self.confidence,
                "evidence": list(self.evidence), "source": self.source}


@dataclass(frozen=True)
class HealthResult:
    bad_nodes: tuple[str, ...]
    good_nodes: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    ran: bool = True


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: str
    size: float | None = None
    checksum: str | None = None
    created_ts: float = 0.0


class LogWatcher(Protocol):
    """A streaming diagnoser: fed each output line as it appears."""

    def feed(self, line: str, *, rank: int | None = None, node: str | None = None) -> None: ...
    def finding(self) -> Finding | None: ...
    def compressed_lines(self) -> list[str]: ...


# ------------------------------------------------------------- diagnosis

@dataclass
class StreamingWatcher:
    """Wraps :class:`slurm_acme.diagnose.StreamingDiagnoser` behind :class:`LogWatcher`."""

    rule_files: Sequence[str] = ()
    _inner: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        from slurm_acme.diagnose import StreamingDiagnoser

        rulebook = None
        if self.rule_files:
            rulebook = _load_rulebook(self.rule_files)
        self._inner = StreamingDiagnoser(rulebook=rulebook)

    def feed(self, line: str, *, rank: int | None = None, node: str | None = None) -> None:
        self._inner.feed(line, rank=rank, node=node)

    def finding(self) -> Finding | None:
        return finding_from(self._inner.result())

    def compressed_lines(self) -> list[str]:
        return list(self._inner.compressed_lines())


def _load_rulebook(rule_files: Sequence[str]) -> Any:
    diagnose = importlib.import_module("slurm_acme.diagnose")
    rulebook_cls = getattr(diagnose, "RuleBook", None)
    for name in ("load", "from_files", "default"):
        loader = getattr(rulebook_cls, name, None) if rulebook_cls else None
        if loader is not None:
            try:
                return loader(list(rule_files)) if name != "default" else loader()
            except TypeError:
                continue
    return None


def finding_from(diagnosis: Any) -> Finding | None:
    """A :class:`Finding` from a ``slurm_acme.diagnose.Diagnosis`` (None when it has none)."""
    if diagnosis is None:
        return None
    category = getattr(diagnosis, "category", None)
    if not category:
        return None
    evidence = getattr(diagnosis, "evidence", ()) or ()
    if isinstance(evidence, str):
        evidence = evidence.splitlines()
    return Finding(
        category=str(category), origin=str(getattr(diagnosis, "origin", "unknown") or "unknown"),
        action=str(getattr(diagnosis, "action", "requeue") or "requeue"),
        node=getattr(diagnosis, "node", None) or None,
        rule_id=getattr(diagnosis, "rule_id", None),
        confidence=getattr(diagnosis, "confidence", None),
        evidence=tuple(str(e) for e in evidence)[:20],
        source=str(getattr(diagnosis, "source", "rule") or "rule"),
    )


@dataclass
class TailWatcher:
    """Used only when ``slurm_acme.diagnose`` cannot be imported: keeps the log's
    tail and gives no finding, so the policy treats failures as unknown (requeue)."""

    rule_files: Sequence[str] = ()
    tail: list[str] = field(default_factory=list)

    def feed(self, line: str, *, rank: int | None = None, node: str | None = None) -> None:
        self.tail = [*self.tail[-199:], f"{rank}: {line}" if rank is not None else line]

    def finding(self) -> Finding | None:
        return None

    def compressed_lines(self) -> list[str]:
        return list(self.tail)


def make_watcher(rule_files: Sequence[str] = ()) -> LogWatcher:
    try:
        return StreamingWatcher(rule_files)
    except ImportError as exc:
        log.warning("diagnosis unavailable (%s): failures will be treated as unknown", exc)
        return TailWatcher(rule_files)


# ----------------------------------------------------------- health check

def health_check(nodes: Sequence[str], *, job_id: str | None, timeout_s: float,
                 gpus_per_node: int | None = None) -> HealthResult:
    """Two-round allgather bisection over ``nodes`` inside the job's allocation."""
    from slurm_acme.health import run_health_check

    report = run_health_check(list(nodes), timeout_s=timeout_s, job_id=job_id,
                              gpus_per_node=gpus_per_node or None)
    evidence = tuple(str(e) for e in (getattr(report, "evidence", ()) or ()))[:20]
    return HealthResult(bad_nodes=tuple(report.bad_nodes),
                        good_nodes=tuple(getattr(report, "good_nodes", ()) or ()),
                        evidence=evidence)


# ------------------------------------------------------------ checkpoints

def _as_checkpoint(ref: Any) -> Checkpoint:
    return Checkpoint(step=int(ref.step), path=str(ref.path),
                      size=getattr(ref, "bytes", None), checksum=getattr(ref, "checksum", None),
                      created_ts=float(getattr(ref, "created_ts", 0.0) or 0.0))


def healthy_checkpoints(ckpt_dir: str) -> list[Checkpoint]:
    """Every healthy checkpoint on disk, oldest first (the manifest decides health:
    committed, and every shard present at its recorded size)."""
    from slurm_acme.ckpt import manifest

    healthy = []
    for ref in manifest.list_checkpoints(ckpt_dir):
        record = manifest.read_manifest(ref.path)
        if record is not None and manifest.files_present(ref.path, record) is None:
            healthy.append(_as_checkpoint(ref))
    return sorted(healthy, key=lambda c: c.step)
