"""The one door to Slurm: argument lists in, typed records out.

Nothing else in slurm-acme runs a Slurm command or parses Slurm's output.
"""

from slurm_acme.slurm.client import Slurm, default_client
from slurm_acme.slurm.errors import JobNotFound, SlurmError, SlurmParseError, SlurmUnavailable
from slurm_acme.slurm.records import NodeInfo, QueueJob, SacctJob, ScontrolJob, ScontrolNode
from slurm_acme.slurm.runner import run_slurm
from slurm_acme.slurm.states import JobState

__all__ = [
    "JobNotFound", "JobState", "NodeInfo", "QueueJob", "SacctJob", "ScontrolJob", "ScontrolNode", "Slurm",
    "SlurmError", "SlurmParseError", "SlurmUnavailable", "default_client", "run_slurm",
]
