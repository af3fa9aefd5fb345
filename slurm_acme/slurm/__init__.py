"""The one door to Slurm: argument lists in, typed records out.

Nothing else in slurm-acme runs a Slurm command or parses Slurm's output.
"""

from slurm_acme.slurm.client import Slurm, default_client, sbatch_argv
from slurm_acme.slurm.errors import JobNotFound, SlurmError, SlurmParseError, SlurmUnavailable
from slurm_acme.slurm.records import NodeEvent, NodeInfo, QueueJob, SacctJob, ScontrolJob, ScontrolNode
from slurm_acme.slurm.runner import run_slurm
from slurm_acme.slurm.states import JobState
from slurm_acme.slurm.steps import (
    StepOutput,
    StepRequest,
    run_step,
    start_step,
    step_argv,
    step_env,
)

__all__ = [
    "JobNotFound", "JobState", "NodeEvent", "NodeInfo", "QueueJob", "SacctJob", "ScontrolJob", "ScontrolNode", "Slurm",
    "SlurmError", "SlurmParseError", "SlurmUnavailable", "StepOutput", "StepRequest", "default_client",
    "run_slurm", "run_step", "sbatch_argv", "start_step", "step_argv", "step_env",
]
