"""The restart policy: how an attempt ended -> what the supervisor does next.

Pure functions over frozen records, so every branch of the paper's recovery
rules (requeue with exclusion, rollback with skipped steps, stop on script
errors, stop at ``max_restarts``) is a unit test, not a cluster experiment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_acme import exitcodes
from slurm_acme.ft.deps import Checkpoint, Finding

#: Outcomes recorded on an attempt row (``attempts.outcome``).
COMPLETED = "completed"
REQUEUE = "requeue"
ROLLBACK = "rollback"
TIME_LIMIT = "time_limit"
STOP = "stop"
#: Set by the next attempt when the previous one left no decision (NODE_FAIL, kill).
LOST = "lost"
NODE_FAIL = "node_fail"


@dataclass(frozen=True)
class AttemptEnd:
    """Everything the supervisor observed about the attempt that just ended."""

    exit_code: int | None
    finding: Finding | None = None
    hung: bool = False
    time_limit_signal: bool = False
    spike_step: int | None = None
    done: bool = False
    #: The trainer reported (metrics) that it checkpointed for a requeue; srun's own exit
    #: code may hide that when --kill-on-bad-exit terminated the slower ranks.
    checkpointed_for_requeue: bool = False


@dataclass(frozen=True)
class Decision:
    outcome: str  # completed / requeue / rollback / time_limit / stop
    reason: str
    exclude: tuple[str, ...] = ()
    #: Infrastructure failure without a culprit from the logs: ask the health check.
    needs_culprit: bool = False
    rollback_before: int | None = None
    add_skip: tuple[tuple[int, int], ...] = ()
    #: Whether this requeue counts against ``max_restarts``.
    counts_as_restart: bool = True
    finding: Finding | None = field(default=None, compare=False)

    @property
    def requeues(self) -> bool:
        return self.outcome in (REQUEUE, ROLLBACK, TIME_LIMIT)

    @property
    def exit_code(self) -> int:
        if self.outcome == COMPLETED:
            return exitcodes.OK
        return exitcodes.SUPERVISOR_REQUEUE if self.requeues else exitcodes.SUPERVISOR_STOP


def decide(end: AttemptEnd, *, restarts_used: int, max_restarts: int,
           spike_skip: int = 1, hang_timeout: float | None = None) -> Decision:
    """The paper's rules, in order of precedence."""
    decision = _classify(end, spike_skip=spike_skip, hang_timeout=hang_timeout)
    if decision.requeues and decision.counts_as_restart and restarts_used >= max_restarts:
        return Decision(STOP, f"max_restarts ({max_restarts}) reached; last failure: "
                        f"{decision.reason}", finding=decision.finding)
    return decision


def _classify(end: AttemptEnd, *, spike_skip: int, hang_timeout: float | None) -> Decision:
    finding = end.finding
    if end.exit_code == 0 and not end.hung:
        return Decision(COMPLETED, "training finished", finding=finding)
    if end.exit_code == exitcodes.TRAIN_CHECKPOINTED_REQUEUE or end.checkpointed_for_requeue or (
            end.time_limit_signal and end.exit_code in (0, None)):
        return Decision(TIME_LIMIT, "time limit near: trainer checkpointed; requeue",
                        counts_as_restart=False, finding=finding)
    if end.exit_code == exitcodes.TRAIN_ROLLBACK or end.spike_step is not None:
        step = end.spike_step
        if step is None:
            return Decision(ROLLBACK, "loss guard asked for a rollback (no step reported)",
                            finding=finding)
        spike = Finding(category="LossSpike", origin="unknown", action="rollback",
                        evidence=(f"loss spike or NaN at step {step} (metrics heartbeat)",),
                        source="metrics")
        return Decision(ROLLBACK, f"loss spike at step {step}: roll back and skip "
                        f"steps {step}-{step + spike_skip - 1}", rollback_before=step,
                        add_skip=((step, step + spike_skip - 1),), finding=spike)
    if end.hung:
        after = f" for {hang_timeout:g}s" if hang_timeout else ""
        hang = Finding(category="hang", origin="infrastructure", action="requeue_exclude_node",
                       evidence=(f"no new training step{after}",), source="supervisor")
        return Decision(REQUEUE, f"hang: no new step{after}", needs_culprit=True, finding=hang)
    if finding is None:
        return Decision(REQUEUE, f"exit code {end.exit_code} with no diagnosis: requeue",
                        finding=None)
    if finding.action == "stop" or finding.origin in ("script", "framework"):
        return Decision(STOP, f"{finding.origin} error ({finding.category}): will not go away "
                        "by retrying", finding=finding)
    if finding.action == "rollback":
        return Decision(ROLLBACK, f"{finding.category}: roll back to the last healthy "
                        "checkpoint", finding=finding)
    if finding.origin == "infrastructure" or finding.action == "requeue_exclude_node":
        if finding.node:
            return Decision(REQUEUE, f"infrastructure ({finding.category}) on {finding.node}: "
                            "exclude it and requeue", exclude=(finding.node,), finding=finding)
        return Decision(REQUEUE, f"infrastructure ({finding.category}): find the culprit "
                        "with a health check, exclude it, requeue", needs_culprit=True,
                        finding=finding)
    return Decision(REQUEUE, f"{finding.category}: requeue", finding=finding)


# ------------------------------------------------------------- skipping

def parse_skips(text: str | None) -> list[tuple[int, int]]:
    """``"100-120,300-300"`` -> [(100, 120), (300, 300)] (inclusive ranges)."""
    out = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.append((int(lo), int(hi or lo)))
    return out


def merge_skips(*groups: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> str:
    """Union of inclusive ranges, rendered the way the trainer reads ``ACME_SKIP_STEPS``."""
    ranges = sorted(r for group in groups for r in group)
    merged: list[list[int]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return ",".join(f"{lo}-{hi}" for lo, hi in merged)


def resume_point(healthy: list[Checkpoint],
                 rollbacks: list[tuple[float, int]]) -> Checkpoint | None:
    """The newest healthy checkpoint not tainted by a loss spike.

    A checkpoint is tainted when a rollback decided at time ``ts`` for a spike
    at step ``S`` finds it at a step >= S written before ``ts``: it may hold
    the spike's weights. Checkpoints written after the rollback are clean.
    """
    def tainted(ck: Checkpoint) -> bool:
        return any(ck.step >= step and (not ck.created_ts or ck.created_ts <= ts)
                   for ts, step in rollbacks)

    clean = [c for c in healthy if not tainted(c)]
    return max(clean, key=lambda c: c.step) if clean else None
