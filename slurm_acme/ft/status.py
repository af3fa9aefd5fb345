"""What ``sacme status`` shows: a run's attempts, their endings, and its goodput.

Built from the store (attempts, failures), the checkpoints on disk now (the
trainer's own and slurm-acme's: what a resume would find, not what a store
row remembers), and the step records each attempt left -- the trainer's
metrics file, else the steps the supervisor read from its output -- into a
frozen record that the CLI renders as a table or as JSON.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from slurm_acme.contracts import AttemptFile, MetricEvent, attempt_file, run_dir_for
from slurm_acme.ft.checkpoints import find_checkpoints
from slurm_acme.ft.metrics import read_records, useful_seconds
from slurm_acme.ft.states import AttemptOutcome, RunState
from slurm_acme.ft.stored_spec import read_stored_spec
from slurm_acme.slurm import JobNotFound, JobState, Slurm, SlurmError
from slurm_acme.store import Store
from slurm_acme.store import runs as run_store


@dataclass(frozen=True)
class AttemptView:
    """One attempt as ``sacme status`` shows it."""

    attempt: int
    job_id: str
    nodes: str
    start_ts: float
    end_ts: float | None
    outcome: str | None
    exit_code: int | None
    reason: str | None
    diagnosis: dict[str, Any] | None
    excluded: list[str]
    resumed_from_step: int | None
    skip_steps: str
    last_step: int | None
    time_lost_s: float | None
    #: Restarted inside the allocation (``fault_tolerance.spares``): failed node -> the
    #: spare that took its place in the next attempt ({}: same nodes).
    replaced: dict[str, str] | None = None


@dataclass(frozen=True)
class RunView:
    """A run as ``sacme status`` shows it (``--json`` prints it whole)."""

    run_id: str
    name: str
    state: str
    reason: str | None
    job_id: str | None
    attempts: list[AttemptView]
    excluded_nodes: list[str]
    #: Steps of the checkpoints on disk now, oldest first.
    checkpoints: list[int]
    #: The newest of them ({step, path, kind}): what the next attempt resumes from.
    latest_checkpoint: dict[str, Any] | None
    wall_s: float
    useful_s: float
    time_lost_s: float
    #: Useful training GPU time over allocated GPU time: idle spares are allocated too.
    goodput: float | None
    last_step: int | None
    #: Nodes that train, and nodes the job holds (training + spares).
    training_nodes: int = 0
    allocated_nodes: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)


def metric_files(run: run_store.RunRow, attempts: list[run_store.AttemptRow]) -> list[Path]:
    run_dir = Path(run_dir_for(run.workdir or ".", run.run_id))
    return [attempt_file(run_dir, a.attempt, a.job_id, AttemptFile.METRICS) for a in attempts]


def step_files(run: run_store.RunRow, attempts: list[run_store.AttemptRow]) -> list[Path]:
    """Per attempt, where its steps are: the trainer's metrics file when it wrote step
    records, else the steps the supervisor read from the trainer's output."""
    run_dir = Path(run_dir_for(run.workdir or ".", run.run_id))
    out = []
    for a, metrics in zip(attempts, metric_files(run, attempts), strict=True):
        has_steps = any(r.get("event", MetricEvent.STEP.value) == MetricEvent.STEP.value
                        for r in read_records(metrics))
        out.append(metrics if has_steps else
                   attempt_file(run_dir, a.attempt, a.job_id, AttemptFile.PROGRESS))
    return out


#: Job states after which Slurm starts no new attempt by itself (NODE_FAIL and PREEMPTED
#: are left out: Slurm may still requeue those).
_FINAL = frozenset({JobState.FAILED, JobState.COMPLETED, JobState.TIMEOUT, JobState.OUT_OF_MEMORY,
                    JobState.BOOT_FAIL, JobState.DEADLINE})


def reconcile(run: run_store.RunRow, slurm: Slurm | None) -> run_store.RunRow:
    """A run the store thinks is alive whose job Slurm says ended is shown as it is.

    The supervisor records scancel and every decision itself; this covers a
    supervisor that never got to (killed when Slurm's KillWait ran out, or one that
    could not start): a cancelled job's run shows CANCELLED; a job that ended while
    its run was PENDING or RUNNING (not REQUEUED: a requeue passes through
    ended-looking states) left no decision, so its run shows STOPPED, with the job's
    log named. Status only reads (the store is opened read-only): the row is not
    changed, the view is.
    """
    state = RunState.parse(run.state)
    if slurm is None or state.is_terminal() or not run.last_job_id:
        return run
    try:
        job = slurm.show_job(run.last_job_id)
    except (JobNotFound, SlurmError):
        return run
    if job.state is JobState.CANCELLED:
        new, reason = RunState.CANCELLED, "cancelled (scancel); recorded by sacme status"
    elif job.state in _FINAL and state in (RunState.PENDING, RunState.RUNNING):
        log = Path(run_dir_for(run.workdir or ".", run.run_id)) / f"slurm-{run.last_job_id}.out"
        new, reason = RunState.STOPPED, (f"job {run.last_job_id} ended {job.state.value} without a "
                                         f"decision by the supervisor; see {log}")
    else:
        return run
    return replace(run, state=new.value, reason=reason)


def checkpoints_on_disk(store: Store, run: run_store.RunRow) -> list[dict[str, Any]]:
    """The run's checkpoints on disk now; the store's record of them only when the spec
    cannot say where they are (a row written by an older version)."""
    spec = read_stored_spec(run.spec)
    if spec is None:
        return [{"step": c.step, "path": c.path, "kind": None, "bytes": c.bytes}
                for c in run_store.list_checkpoints(store, run.run_id)]
    folder = Path(run.workdir or ".") / Path(spec.checkpoint_dir).expanduser()
    return [{"step": c.step, "path": c.path, "kind": c.kind, "bytes": c.size}
            for c in find_checkpoints(folder, spec.checkpoint_globs)]


def run_view(store: Store, run: run_store.RunRow, slurm: Slurm | None = None) -> RunView:
    run = reconcile(run, slurm)
    attempts = run_store.list_attempts(store, run.run_id)
    failures = run_store.get_failures(store, [a.failure_id for a in attempts if a.failure_id])
    views = []
    cancelled = run.state == RunState.CANCELLED.value
    for a in attempts:
        outcome = a.outcome
        if cancelled and outcome is None and a.job_id == run.last_job_id:
            # scancel ended the job before the supervisor wrote the attempt's end
            # (or it never could): the view says what happened, as reconcile does.
            outcome = AttemptOutcome.CANCELLED.value
        f = failures.get(a.failure_id) if a.failure_id else None
        diagnosis = None
        if f is not None:
            diagnosis = {"category": f.category, "origin": f.origin, "action": f.action,
                         "node": f.node, "rule_id": f.rule_id, "source": f.source,
                         "evidence": list(f.evidence)[:5]}
        views.append(AttemptView(
            attempt=a.attempt, job_id=a.job_id, nodes=a.nodelist or "", start_ts=a.start_ts,
            end_ts=a.end_ts, outcome=outcome, exit_code=a.exit_code,
            reason=a.details.get("reason"), diagnosis=diagnosis, excluded=a.excluded,
            resumed_from_step=a.resumed_from_step, skip_steps=a.skip_steps or "",
            last_step=a.last_step, time_lost_s=a.time_lost_s,
            replaced=a.details.get("replaced") if a.details.get("in_place") else None))
    useful, last_step = useful_seconds(step_files(run, attempts))
    first = min((a.start_ts for a in attempts), default=None)
    last = max((a.end_ts or time.time() for a in attempts), default=None)
    wall = (last - first) if first is not None and last is not None else 0.0
    lost = sum(a.time_lost_s or 0.0 for a in attempts)
    excluded = sorted({n for a in attempts for n in a.excluded})
    ckpts = checkpoints_on_disk(store, run)
    training, allocated = _node_counts(run)
    return RunView(run_id=run.run_id, name=run.name, state=run.state, reason=run.reason,
                   job_id=run.last_job_id, attempts=views, excluded_nodes=excluded,
                   checkpoints=[c["step"] for c in ckpts],
                   latest_checkpoint=ckpts[-1] if ckpts else None,
                   wall_s=round(wall, 2), useful_s=round(useful, 2),
                   time_lost_s=round(lost, 2),
                   goodput=round(useful * training / (wall * allocated), 3) if wall > 0 else None,
                   last_step=last_step, training_nodes=training, allocated_nodes=allocated)


def _node_counts(run: run_store.RunRow) -> tuple[int, int]:
    """(training nodes, allocated nodes) of the run's spec; (1, 1) when it cannot be read."""
    spec = read_stored_spec(run.spec)
    return (spec.nodes, spec.allocated_nodes) if spec is not None else (1, 1)
