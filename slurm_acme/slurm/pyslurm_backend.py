"""Whether the installed pyslurm may talk to this cluster.

pyslurm is compiled against one libslurm release line; used against another it
crashes or misreads structures. It is only eligible when its major.minor
equals the cluster's (``pyslurm 22.5.x`` <-> ``slurm 22.05.x``).
"""

from __future__ import annotations

import importlib
import re
from functools import lru_cache

from slurm_acme.slurm.errors import SlurmError
from slurm_acme.slurm.runner import run_slurm


def major_minor(version: str) -> tuple[int, int] | None:
    """``"22.05.8"``, ``"slurm-wlm 22.05.8"`` or ``"22.5.1"`` -> ``(22, 5)``."""
    match = re.search(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def installed_pyslurm_version() -> str | None:
    try:
        module = importlib.import_module("pyslurm")
    except Exception:
        return None
    return str(getattr(module, "__version__", "") or "") or None


def cluster_version(timeout: float = 10.0) -> str | None:
    """The Slurm release of this host's tools (``scontrol --version``)."""
    try:
        return run_slurm(["scontrol", "--version"], timeout=timeout).strip() or None
    except SlurmError:
        return None


@lru_cache(maxsize=1)
def pyslurm_matches() -> bool:
    """True when pyslurm imports and was built for this cluster's libslurm."""
    mine = installed_pyslurm_version()
    if mine is None:
        return False
    theirs = cluster_version()
    return theirs is not None and major_minor(mine) == major_minor(theirs)
