"""Every process exit code slurm-acme uses, in one place.

The CLI is an API: scripts and the in-job supervisor branch on these numbers,
so they are declared once here and documented in the README.
"""

from __future__ import annotations

OK = 0
#: The thing checked failed (bad nodes found, a diagnosis says stop, ...).
CHECK_FAILED = 1
#: Usage or input error: bad flag, bad file, unreachable database, Slurm down.
USAGE = 2

#: Exit code of a training process whose loss-spike guard asks for a rollback to
#: the last healthy checkpoint (read by the supervisor).
TRAIN_ROLLBACK = 75
#: Exit code of a training process that checkpointed after a time-limit signal
#: and wants to be requeued.
TRAIN_CHECKPOINTED_REQUEUE = 76
#: Supervisor decided to requeue the job (possibly with exclusions / rollback).
SUPERVISOR_REQUEUE = 77
#: Supervisor decided to stop: the failure will not go away by retrying
#: (script or framework error, or max_restarts reached). Never requeue.
SUPERVISOR_STOP = 93
#: Supervisor ended by Slurm (SIGTERM: a node failure, a preemption, a requeue by Slurm);
#: the conventional 128 + 15. The next attempt, if Slurm starts one, carries on.
SUPERVISOR_KILLED = 143
