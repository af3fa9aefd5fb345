"""Which GPU indices Slurm gave a job on one node, for marks that could not say.

Slurm only puts ``SLURM_JOB_GPUS`` into the prolog's environment when the
gres.conf ``File=`` entries are real device files; on a site (or the emulated
local cluster) where they are not, the collector asks ``scontrol -d show job``
once per job start. The hooks never do this: they must not run Slurm commands.

The command and its parser live in the Slurm door (``Slurm.job_gpus_on_node``,
``parse.gpu_indices_on``); the names here are kept for this package's callers.
"""

from __future__ import annotations

from collections.abc import Callable

from slurm_acme.slurm import Slurm
from slurm_acme.slurm.parse import expand_hostlist, gpu_indices_on
from slurm_acme.slurm.runner import run_slurm

__all__ = ["allocated_gpus", "expand_hostlist", "parse"]


def parse(text: str, node: str) -> tuple[int, ...] | None:
    """GPU indices on ``node`` from ``scontrol -d -o show job`` output (None: node absent)."""
    return gpu_indices_on(text, node)


def allocated_gpus(job_id: str, node: str, *, timeout: float,
                   runner: Callable[..., str] = run_slurm) -> tuple[int, ...] | None:
    return Slurm(timeout=timeout, runner=runner).job_gpus_on_node(job_id, node)
