"""Which submission mode is safe on this cluster.

On ``job_container/tmpfs`` sites every job gets a private ``/dev/shm`` and
``/tmp``: a copy preloaded by one job is invisible to the next. There the
safe design is one allocation per node that preloads and then runs its
trials as srun steps (``allocation`` mode); elsewhere separate jobs share
the node-local copy (``jobs`` mode).
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_acme.slurm import Slurm
from slurm_acme.slurm.parse import parse_scontrol_show_config


def job_container_type(show_config: Mapping[str, str] | str) -> str:
    """``JobContainerType`` of the controller's configuration ('' if absent).

    Takes :meth:`Slurm.show_config`'s mapping, or ``scontrol show config``
    text (read by the door's parser).
    """
    config = parse_scontrol_show_config(show_config) if isinstance(show_config, str) else show_config
    words = (config.get("JobContainerType") or "").split()
    return words[0] if words else ""


def mode_for(container_type: str, local_dir: str) -> str:
    """``allocation`` when the node-local dir is private per job, else ``jobs``."""
    private = container_type.endswith("tmpfs") and local_dir.startswith(("/dev/shm", "/tmp"))
    return "allocation" if private else "jobs"


def read_show_config(timeout: float = 30.0) -> dict[str, str]:
    """The controller's configuration, through the door (``Slurm.show_config``)."""
    return Slurm(timeout=timeout).show_config()
