"""Compile slurm-acme's bytecode before a benchmark times ``sacme`` processes.

``pip install`` of the wheel compiles every module, so an installed site never
pays compilation; a source checkout run with ``PYTHONDONTWRITEBYTECODE`` (as
this project's machines set it) recompiles every module it imports in every
process, 60-90 ms a command. The benchmarks time what a site runs, and say so
in their JSON (``bytecode``).
"""

from __future__ import annotations

import compileall
from pathlib import Path

import slurm_acme

COMPILED = "compiled first, as pip install does"
SOURCE_ONLY = "source only"


def compile_like_pip(enabled: bool = True) -> str:
    """Write the package's ``__pycache__`` (unless ``enabled`` is false); the JSON label."""
    if not enabled:
        return SOURCE_ONLY
    compileall.compile_dir(str(Path(slurm_acme.__file__).parent), quiet=1)
    return COMPILED
