"""Which GPU indices Slurm gave a job on one node, for marks that could not say.

Slurm only puts ``SLURM_JOB_GPUS`` into the prolog's environment when the
gres.conf ``File=`` entries are real device files; on a site (or the emulated
local cluster) where they are not, the collector asks ``scontrol -d show job``
once per job start. The hooks never do this: they must not run Slurm commands.

Adapter in this package because the Slurm door has no per-node GRES index
query yet. TODO(slurm door): move ``argv`` and ``parse`` into slurm_acme.slurm.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from slurm_acme.slurm.runner import run_slurm

_NODE_GRES = re.compile(r"\bNodes=(\S+)\s+CPU_IDs=\S*\s+Mem=\S+\s+GRES=(\S*)")
_GPU_IDX = re.compile(r"gpu(?::[^:(,]+)?:\d+\(IDX:([\d,\-]+)\)")


def argv(job_id: str) -> list[str]:
    return ["scontrol", "-d", "-o", "show", "job", job_id]


def expand_hostlist(hostlist: str) -> list[str]:
    """``node[1-3,5],gpu7`` -> node1 node2 node3 node5 gpu7 (one bracket group per name)."""
    names: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", hostlist):
        match = re.fullmatch(r"(.*)\[([^\]]*)\](.*)", item)
        if not match:
            names.append(item)
            continue
        prefix, ranges, suffix = match.groups()
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for number in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{number:0{width}d}{suffix}")
    return names


def expand_indices(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def parse(text: str, node: str) -> tuple[int, ...] | None:
    """GPU indices on ``node`` from ``scontrol -d -o show job`` output (None: node absent)."""
    for nodes, gres in _NODE_GRES.findall(text):
        if node in expand_hostlist(nodes):
            found = _GPU_IDX.search(gres)
            return tuple(expand_indices(found.group(1))) if found else ()
    return None


def allocated_gpus(job_id: str, node: str, *, timeout: float,
                   runner: Callable[..., str] = run_slurm) -> tuple[int, ...] | None:
    return parse(runner(argv(job_id), timeout=timeout), node)
