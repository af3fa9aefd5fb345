"""Which submission mode is safe on this cluster.

On ``job_container/tmpfs`` sites every job gets a private ``/dev/shm`` and
``/tmp``: a copy preloaded by one job is invisible to the next. There the
safe design is one allocation per node that preloads and then runs its
trials as srun steps (``allocation`` mode); elsewhere separate jobs share
the node-local copy (``jobs`` mode).
"""

from __future__ import annotations

import re

from slurm_acme.slurm.runner import run_slurm

_LINE = re.compile(r"^\s*JobContainerType\s*=\s*(\S+)", re.MULTILINE)


def job_container_type(show_config: str) -> str:
    """``JobContainerType`` from ``scontrol show config`` output ('' if absent)."""
    match = _LINE.search(show_config)
    return match.group(1) if match else ""


def mode_for(container_type: str, local_dir: str) -> str:
    """``allocation`` when the node-local dir is private per job, else ``jobs``."""
    private = container_type.endswith("tmpfs") and local_dir.startswith(("/dev/shm", "/tmp"))
    return "allocation" if private else "jobs"


def read_show_config(timeout: float = 30.0) -> str:
    """``scontrol show config``.

    TODO(slurm door): ``Slurm`` has no ``show_config`` method yet; this tiny
    argv-based call goes through the door's single runner until it does.
    """
    return run_slurm(["scontrol", "show", "config"], timeout=timeout)
