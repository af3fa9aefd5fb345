"""Names that cross a process boundary, declared once.

Each name here is written by one process and read by another: the
supervisor exports the training environment and the trainer reads it; the
trainer appends metric events and the supervisor and ``sacme status`` read
them; the supervisor names an attempt's files and ``sacme logs``/``status``
find them again. A typo on either side is silent (an unset variable, an
event nobody counts, a log "not found"), so both sides import the spelling
from here and ``tests/unit/test_contracts.py`` round-trips each writer
through its reader. Torch-free and import-cheap: the trainer imports it.

What the names mean for a user is documented in ``docs/training.md``.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Final

# ---------------------------------------------------------------- environment
# Written by the batch script (ft/plan.py) for the supervisor:
#: The run's identity across every attempt and Slurm job id.
ENV_RUN_ID: Final = "ACME_RUN_ID"
#: The store URL the supervisor records attempts in.
ENV_DB: Final = "ACME_DB"
#: The config file (also read by every ``sacme`` command).
ENV_CONF: Final = "ACME_CONF"
#: Where the run's logs, metrics and compressed logs live.
ENV_RUN_DIR: Final = "ACME_RUN_DIR"

# Written by the supervisor (ft/launch.py) for every training process:
#: The attempt number (Slurm's restart count: 0, 1, ...).
ENV_ATTEMPT: Final = "ACME_ATTEMPT"
#: The checkpoint directory from train.yaml, absolute.
ENV_CKPT_DIR: Final = "ACME_CKPT_DIR"
ENV_CKPT_INTERVAL: Final = "ACME_CKPT_INTERVAL"
ENV_CKPT_KEEP: Final = "ACME_CKPT_KEEP"
#: "1" when checkpoints should persist in the background.
ENV_CKPT_ASYNC: Final = "ACME_CKPT_ASYNC"
#: The checkpoint to resume from (a directory or file); unset: start from scratch.
ENV_RESUME_FROM: Final = "ACME_RESUME_FROM"
#: The step the checkpoint in ENV_RESUME_FROM holds, when it is known.
ENV_RESUME_STEP: Final = "ACME_RESUME_STEP"
#: Inclusive step ranges whose batches are skipped ("100-120,300-300").
ENV_SKIP_STEPS: Final = "ACME_SKIP_STEPS"
#: The JSONL file metric events go to (see :class:`MetricEvent`).
ENV_METRICS_FILE: Final = "ACME_METRICS_FILE"
ENV_SPIKE_GUARD: Final = "ACME_SPIKE_GUARD"
ENV_SPIKE_RATIO: Final = "ACME_SPIKE_RATIO"
ENV_SPIKE_WARMUP: Final = "ACME_SPIKE_WARMUP"
#: torch.distributed's own rendezvous variables (env:// init), set for srun launches.
ENV_MASTER_ADDR: Final = "MASTER_ADDR"
ENV_MASTER_PORT: Final = "MASTER_PORT"

# Fault injection for tests and the demo (set through train.yaml ``env``):
#: Read by :mod:`slurm_acme.ckpt.faults` inside the trainer.
ENV_FAULTS: Final = "ACME_FAULTS"
#: Read by :mod:`slurm_acme.health.faults` inside the health-check workers.
ENV_HEALTH_FAULT: Final = "ACME_HEALTH_FAULT"

#: Every variable the supervisor sets in the training environment.
TRAINING_ENV: Final = (
    ENV_RUN_ID, ENV_ATTEMPT, ENV_CKPT_DIR, ENV_CKPT_INTERVAL, ENV_CKPT_KEEP, ENV_CKPT_ASYNC,
    ENV_RESUME_FROM, ENV_RESUME_STEP, ENV_SKIP_STEPS, ENV_METRICS_FILE, ENV_SPIKE_GUARD,
    ENV_SPIKE_RATIO, ENV_SPIKE_WARMUP, ENV_MASTER_ADDR, ENV_MASTER_PORT,
)


# ------------------------------------------------------------- metric events
class MetricEvent(str, Enum):
    """The ``event`` of one line of the metrics JSONL (``ENV_METRICS_FILE``).

    Every line is ``{"step": int, "loss": float|null, "time": epoch seconds,
    "event": MetricEvent, "rank": int, ...event fields}``. One writer
    (:class:`slurm_acme.ckpt.metrics.MetricsWriter`); read by the supervisor's
    heartbeat (:class:`slurm_acme.ft.metrics.MetricsTail`) and by goodput
    (:func:`slurm_acme.ft.metrics.useful_seconds`).
    """

    #: A training step finished (its loss, if known).
    STEP = "step"
    #: A checkpoint of ``step`` is committed and healthy.
    CHECKPOINT = "checkpoint"
    CHECKPOINT_ERROR = "checkpoint_error"
    CHECKPOINT_SKIPPED = "checkpoint_skipped"
    CHECKPOINT_WAITED = "checkpoint_waited"
    CHECKPOINT_CORRUPT = "checkpoint_corrupt"
    #: Training resumed from the checkpoint of ``step``.
    RESUME = "resume"
    #: The batch of ``step`` was skipped (``ENV_SKIP_STEPS``).
    SKIP = "skip"
    #: The loss of ``step`` spiked / was not finite: roll back.
    SPIKE = "spike"
    NAN = "nan"
    #: Checkpointed after the time-limit signal (``checkpointed: bool``); requeue me.
    REQUEUE = "requeue"
    #: Training reached its last step; a signal after this never fails the run.
    DONE = "done"

    def __str__(self) -> str:
        return self.value


#: Events that show the training loop is moving (the hang clock's progress).
PROGRESS_EVENTS: Final = frozenset({MetricEvent.STEP, MetricEvent.RESUME, MetricEvent.SKIP,
                                    MetricEvent.CHECKPOINT})
#: Events that ask for a rollback to the newest healthy checkpoint before ``step``.
ROLLBACK_EVENTS: Final = frozenset({MetricEvent.SPIKE, MetricEvent.NAN})


def metric_event(raw: object) -> MetricEvent | None:
    """The event of a decoded metrics record (a missing ``event`` is a step); None if unknown."""
    if raw is None:
        return MetricEvent.STEP
    try:
        return MetricEvent(raw)
    except ValueError:
        return None


# -------------------------------------------------------------- attempt files
class AttemptFile(str, Enum):
    """The files one attempt leaves in the run directory, by kind."""

    #: srun's labelled output of every rank, as it came.
    LOG = "log"
    #: The diagnoser's compressed view of LOG (``sacme logs``).
    COMPRESSED_LOG = "compressed.log"
    #: The trainer's metric events (``ENV_METRICS_FILE``).
    METRICS = "metrics.jsonl"
    #: Steps the supervisor read from the trainer's output (same line format as METRICS).
    PROGRESS = "progress.jsonl"

    def __str__(self) -> str:
        return self.value


def run_dir_for(workdir: str, run_id: str) -> str:
    """``WORKDIR/acme-runs/<run_id>``: where a run's logs, metrics and compressed logs
    live, shared by all its attempts (``sacme submit`` makes it, status reads it)."""
    return str(Path(workdir) / "acme-runs" / run_id)


def attempt_file(run_dir: str | Path, attempt: int, job_id: str, kind: AttemptFile) -> Path:
    """``RUN_DIR/attempt-<attempt>-<job_id>.<kind>``: one attempt's file of ``kind``."""
    return Path(run_dir) / f"attempt-{int(attempt)}-{job_id}.{AttemptFile(kind).value}"


#: The detached requeue helper's log, one per run directory.
REQUEUE_HELPER_LOG: Final = "requeue-helper.log"


# -------------------------------------------------------------- telemetry marks
#: The prolog/epilog mark format's version: written by the hooks
#: (``prolog/acme-prolog`` prints ``"v":1``), read by the node collector
#: (``telemetry/marks.py``). Bump it, and keep reading the old one, whenever a
#: mark field changes meaning; ``tests/unit/test_telemetry_hooks.py`` runs the
#: real hooks and reads their marks back.
MARK_VERSION: Final = 1
