"""The restart policy: how an attempt ended -> what the supervisor does next.

Pure functions over frozen records, so every branch of the paper's recovery
rules (requeue with exclusion, rollback with skipped steps, stop on script
errors, stop at ``max_restarts``) and of doubt (an unknown failure asks the
health check and has its own, lower cap; out of memory is never retried
unchanged) is a unit test, not a cluster experiment.

The diagnosis is :class:`slurm_acme.diagnose.Diagnosis`; its ``action`` says
what to do (``requeue``, ``requeue_exclude_node``, ``rollback``, ``stop``) and
``node`` is the culprit when the evidence names one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_acme import exitcodes
from slurm_acme.diagnose import Diagnosis
from slurm_acme.ft.checkpoints import Checkpoint
from slurm_acme.ft.progress import Hang
from slurm_acme.ft.states import AttemptOutcome
from slurm_acme.slurm import JobState

#: Diagnosis categories of running out of memory (host or GPU): the same job with the
#: same settings runs out again, so it is never retried unchanged.
OUT_OF_MEMORY_CATEGORIES = frozenset({"OutOfMemoryError", "HostMemoryKilled"})


@dataclass(frozen=True)
class AttemptEnd:
    """Everything the supervisor observed about the training step that just ended."""

    exit_code: int | None
    diagnosis: Diagnosis | None = None
    #: The hang clock ran out (and which limit applied); the supervisor stopped the step.
    hang: Hang | None = None
    #: Slurm's time-limit warning (USR2) arrived before the trainer said done.
    time_limit_signal: bool = False
    #: What was done about it: "checkpoint" (USR2 forwarded) or "stop" (step ended).
    time_limit_action: str | None = None
    #: Slurm ended the job (SIGTERM to the batch step): scancel, node failure, time limit.
    terminated: bool = False
    spike_step: int | None = None
    #: The trainer said its last step is done (metrics ``done``).
    done: bool = False
    #: The trainer reported (metrics) that it checkpointed for a requeue; srun's own exit
    #: code may hide that when --kill-on-bad-exit terminated the slower ranks.
    checkpointed_for_requeue: bool = False
    last_step: int | None = None
    last_ckpt_ts: float | None = None
    compressed: tuple[str, ...] = field(default=(), repr=False)
    #: The trainer wrote metric records (it speaks the contract).
    spoke_metrics: bool = False

    @property
    def hung(self) -> bool:
        return self.hang is not None


@dataclass(frozen=True)
class Decision:
    """What the supervisor does after an attempt, and why (recorded before it acts)."""

    outcome: AttemptOutcome
    reason: str
    exclude: tuple[str, ...] = ()
    #: No culprit from the logs: ask the health check which nodes to exclude.
    needs_culprit: bool = False
    rollback_before: int | None = None
    add_skip: tuple[tuple[int, int], ...] = ()
    #: Whether this requeue counts against ``max_restarts``.
    counts_as_restart: bool = True
    #: Nobody recognised the failure: counts against ``max_unknown_restarts`` too.
    unknown: bool = False
    #: Nodes the requeued job asks for, when fewer than train.yaml's nodes + spares are left.
    num_nodes: int | None = None
    diagnosis: Diagnosis | None = field(default=None, compare=False)

    @property
    def requeues(self) -> bool:
        return self.outcome.requeues

    @property
    def exit_code(self) -> int:
        """The supervisor's exit code (the contract in :mod:`slurm_acme.exitcodes`)."""
        if self.outcome is AttemptOutcome.COMPLETED:
            return exitcodes.OK
        if self.requeues:
            return exitcodes.SUPERVISOR_REQUEUE
        if self.outcome in (AttemptOutcome.KILLED, AttemptOutcome.NODE_FAIL):
            return exitcodes.SUPERVISOR_KILLED
        return exitcodes.SUPERVISOR_STOP


@dataclass(frozen=True)
class Budget:
    """Restarts used by earlier attempts, and the caps from train.yaml."""

    restarts_used: int = 0
    unknown_used: int = 0
    max_restarts: int = 3
    max_unknown_restarts: int = 1


def decide(end: AttemptEnd, budget: Budget, *, spike_skip: int = 1) -> Decision:
    """The paper's rules, in order of precedence, then the restart caps."""
    decision = _classify(end, spike_skip=spike_skip)
    if not (decision.requeues and decision.counts_as_restart):
        return decision
    if budget.restarts_used >= budget.max_restarts:
        return Decision(AttemptOutcome.STOP, f"max_restarts ({budget.max_restarts}) reached; "
                        f"last failure: {decision.reason}", diagnosis=decision.diagnosis)
    if decision.unknown and budget.unknown_used >= budget.max_unknown_restarts:
        return Decision(AttemptOutcome.STOP, f"max_unknown_restarts "
                        f"({budget.max_unknown_restarts}) reached: an unrecognised failure came "
                        f"back; last failure: {decision.reason}", diagnosis=decision.diagnosis)
    return decision


def _finished(end: AttemptEnd) -> Decision | None:
    if end.done:
        tail = "" if end.exit_code == 0 else f"; exit code {end.exit_code} after it ignored"
        return Decision(AttemptOutcome.COMPLETED, f"training finished (done at step "
                        f"{end.last_step}){tail}", diagnosis=None)
    if end.time_limit_signal and (
            end.time_limit_action == "stop" or end.checkpointed_for_requeue
            or end.exit_code in (0, None, exitcodes.TRAIN_CHECKPOINTED_REQUEUE)):
        how = ("trainer checkpointed" if end.time_limit_action == "checkpoint"
               else "step stopped; resume from the newest checkpoint")
        return Decision(AttemptOutcome.TIME_LIMIT, f"time limit near: {how}; requeue",
                        counts_as_restart=False)
    if end.exit_code == exitcodes.TRAIN_CHECKPOINTED_REQUEUE or end.checkpointed_for_requeue:
        return Decision(AttemptOutcome.TIME_LIMIT, "trainer checkpointed for a requeue",
                        counts_as_restart=False)
    if end.exit_code == 0 and not end.hung:
        return Decision(AttemptOutcome.COMPLETED, "training finished")
    return None


def _classify(end: AttemptEnd, *, spike_skip: int) -> Decision:
    finished = _finished(end)
    if finished is not None:
        return finished
    if end.exit_code == exitcodes.TRAIN_ROLLBACK or end.spike_step is not None:
        return _rollback(end.spike_step, spike_skip)
    if end.hang is not None:
        hang = Diagnosis(category="hang", origin="unknown", action="requeue",
                         evidence=(end.hang.reason,), source="supervisor", confidence=1.0)
        return Decision(AttemptOutcome.REQUEUE, end.hang.reason, needs_culprit=True,
                        diagnosis=hang)
    return from_diagnosis(end.diagnosis, end.exit_code)


def _rollback(step: int | None, spike_skip: int) -> Decision:
    if step is None:
        return Decision(AttemptOutcome.ROLLBACK, "loss guard asked for a rollback (no step "
                        "reported)")
    spike = Diagnosis(category="LossSpike", origin="unknown", action="rollback",
                      evidence=(f"loss spike or NaN at step {step} (metrics heartbeat)",),
                      source="metrics", confidence=1.0)
    return Decision(AttemptOutcome.ROLLBACK, f"loss spike at step {step}: roll back and skip "
                    f"steps {step}-{step + spike_skip - 1}", rollback_before=step,
                    add_skip=((step, step + spike_skip - 1),), diagnosis=spike)


def from_diagnosis(diagnosis: Diagnosis | None, exit_code: int | None) -> Decision:
    """What a failed step's diagnosis asks for."""
    if diagnosis is None or diagnosis.is_unknown:
        return Decision(AttemptOutcome.REQUEUE, f"exit code {exit_code}, not recognised: "
                        "health-check the nodes, exclude only those it flags, requeue",
                        needs_culprit=True, unknown=True, diagnosis=diagnosis)
    d = diagnosis
    where = f" on {d.node}" if d.node else ""
    if d.category in OUT_OF_MEMORY_CATEGORIES:
        return Decision(AttemptOutcome.STOP, f"out of memory ({d.category}){where}: the same "
                        "settings would run out again, so it is not retried; lower the batch "
                        "or model size, or ask for more memory (sbatch: {mem: ...})",
                        diagnosis=d)
    if d.action == "stop" or d.origin in ("script", "framework"):
        return Decision(AttemptOutcome.STOP, f"{d.origin} error ({d.category}){where}: will not "
                        "go away by retrying", diagnosis=d)
    if d.action == "rollback":
        return Decision(AttemptOutcome.ROLLBACK, f"{d.category}: roll back to the last healthy "
                        "checkpoint", diagnosis=d)
    if d.action == "requeue_exclude_node" and d.node:
        return Decision(AttemptOutcome.REQUEUE, f"{d.origin} failure ({d.category}) on {d.node}: "
                        "exclude it and requeue", exclude=(d.node,), diagnosis=d)
    if d.action == "requeue_exclude_node" or d.origin == "infrastructure":
        return Decision(AttemptOutcome.REQUEUE, f"infrastructure ({d.category}){where}: find the "
                        "culprit with a health check, exclude it, requeue", needs_culprit=True,
                        diagnosis=d)
    return Decision(AttemptOutcome.REQUEUE, f"{d.category}{where}: requeue", diagnosis=d)


def ended_by_slurm(job_state: JobState | None, down: tuple[str, ...]) -> Decision:
    """Slurm ended the job (SIGTERM to the batch step): why, from the job's and nodes' state."""
    if job_state is JobState.CANCELLED:
        return Decision(AttemptOutcome.CANCELLED, "cancelled (scancel)", counts_as_restart=False)
    if down:
        failure = Diagnosis(category="NodeFailure", origin="infrastructure",
                            action="requeue_exclude_node", node=down[0], confidence=1.0,
                            evidence=tuple(f"{n}: down or not responding in Slurm" for n in down),
                            source="slurm")
        return Decision(AttemptOutcome.NODE_FAIL, f"node(s) {','.join(down)} failed "
                        "(NODE_FAIL); Slurm requeues the job, excluding them",
                        exclude=down, diagnosis=failure)
    if job_state is JobState.TIMEOUT:
        return Decision(AttemptOutcome.TIME_LIMIT, "time limit reached before the warning "
                        "signal was handled (signal_lead too short?); requeue from the newest "
                        "checkpoint", counts_as_restart=False)
    state = job_state.value if job_state is not None else "unknown"
    return Decision(AttemptOutcome.KILLED, f"ended by Slurm (job state {state}); Slurm "
                    "requeues the job")


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
