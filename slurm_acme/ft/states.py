"""The states of a fault-tolerant run and the outcomes of its attempts: one vocabulary.

Both are stored as their ``value`` (``runs.state``, ``attempts.outcome``) by
the supervisor and read back by ``sacme status``, the next attempt's
supervisor and the tests; parsing is total, so a value written by a newer
version reads as ``UNKNOWN`` instead of crashing an older reader.
"""

from __future__ import annotations

from enum import Enum


class RunState(str, Enum):
    """Where a run stands (``sacme status`` shows it)."""

    #: The run row exists and sbatch is being called.
    SUBMITTING = "SUBMITTING"
    #: Submitted; no attempt has started yet.
    PENDING = "PENDING"
    #: An attempt is running.
    RUNNING = "RUNNING"
    #: An attempt ended and the job is requeued for the next one.
    REQUEUED = "REQUEUED"
    #: Training finished.
    COMPLETED = "COMPLETED"
    #: The supervisor stopped: a failure a retry will not fix, or a restart cap reached.
    STOPPED = "STOPPED"
    #: Someone cancelled the job (``scancel``).
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def parse(cls, raw: object) -> RunState:
        return cls.__members__.get(str(raw).upper(), cls.UNKNOWN) if raw else cls.UNKNOWN

    def is_terminal(self) -> bool:
        """True once the run will not continue without a new ``sacme submit``."""
        return self in (RunState.COMPLETED, RunState.STOPPED, RunState.CANCELLED)

    def __str__(self) -> str:
        return self.value


class AttemptOutcome(str, Enum):
    """How one attempt ended: the supervisor's decision, or what the next one found."""

    COMPLETED = "completed"
    #: Requeued after a failure (with exclusions when a culprit node is known).
    REQUEUE = "requeue"
    #: Requeued to resume before a loss spike, skipping its steps.
    ROLLBACK = "rollback"
    #: Requeued after the time-limit warning; does not count as a restart.
    TIME_LIMIT = "time_limit"
    #: The run stops here.
    STOP = "stop"
    #: Slurm ended the job (SIGTERM) and is requeueing it; the next attempt closes it.
    KILLED = "killed"
    #: Closed by the next attempt: a node of it failed (NODE_FAIL or DOWN).
    NODE_FAIL = "node_fail"
    #: Closed by the next attempt: it ended without a decision and no node was down.
    LOST = "lost"
    #: The job was cancelled (``scancel``).
    CANCELLED = "cancelled"
    #: Restarted inside the allocation (``fault_tolerance.spares``): the next attempt runs
    #: in the same job, a spare in place of each failed node; no requeue.
    RESTARTED = "restarted"
    UNKNOWN = "unknown"

    @classmethod
    def parse(cls, raw: object) -> AttemptOutcome | None:
        """None for an attempt still running (no outcome yet); unknown text -> UNKNOWN."""
        if raw is None:
            return None
        try:
            return cls(str(raw))
        except ValueError:
            return cls.UNKNOWN

    def is_terminal(self) -> bool:
        """True when the run ends with this attempt (no next attempt follows)."""
        return self in (AttemptOutcome.COMPLETED, AttemptOutcome.STOP, AttemptOutcome.CANCELLED)

    @property
    def requeues(self) -> bool:
        """The supervisor asked for a next attempt."""
        return self in (AttemptOutcome.REQUEUE, AttemptOutcome.ROLLBACK,
                        AttemptOutcome.TIME_LIMIT)

    @property
    def counts_as_restart(self) -> bool:
        """Counts against ``max_restarts`` (a time-limit requeue is planned, not a failure)."""
        return self in (AttemptOutcome.REQUEUE, AttemptOutcome.ROLLBACK,
                        AttemptOutcome.NODE_FAIL, AttemptOutcome.LOST, AttemptOutcome.KILLED,
                        AttemptOutcome.RESTARTED)

    def run_state(self) -> RunState:
        """The run's state once an attempt ended this way."""
        return {AttemptOutcome.COMPLETED: RunState.COMPLETED, AttemptOutcome.STOP: RunState.STOPPED,
                AttemptOutcome.CANCELLED: RunState.CANCELLED,
                AttemptOutcome.RESTARTED: RunState.RUNNING}.get(self, RunState.REQUEUED)

    def __str__(self) -> str:
        return self.value
