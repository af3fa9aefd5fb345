"""One timed run of an installed hook in its ``check`` mode, as slurmd would start it.

The only process ``sacme admin check`` starts: a bare environment (slurmd gives
hooks none but Slurm's variables and ``SLURM_CONF``), no PATH, ``/`` as the
working folder, a 10 s limit.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

#: A hook that has not finished after this long is reported as hung.
LIMIT_S = 10.0


def timed_check_run(path: Path, node: str) -> tuple[float, dict[str, str] | None]:
    """(milliseconds, the hook's ``key=value`` lines), or (limit, None) when it hung."""
    env = {"SLURM_JOB_ID": "0", "SLURMD_NODENAME": node, "SLURM_JOB_USER": "root",
           "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}
    for key in ("SLURM_CONF", "ACME_CONF"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    started = time.perf_counter()
    try:
        proc = subprocess.run([str(path), "check"], env=env, capture_output=True, text=True,
                              timeout=LIMIT_S, cwd="/", check=False)
    except subprocess.TimeoutExpired:
        return LIMIT_S * 1000, None
    elapsed = (time.perf_counter() - started) * 1000
    pairs = (line.partition("=") for line in proc.stdout.splitlines())
    return elapsed, {k: v for k, sep, v in pairs if sep}
