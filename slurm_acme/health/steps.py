"""Argument lists for the Slurm commands the health check needs beyond the door.

TODO(slurm door): ``slurm_acme.slurm`` has no srun step builder or node
address lookup yet; these pure builders live here until it does, and the
commands run through the door's runner (``run_slurm``) or, for the
long-running srun step, ``subprocess.Popen`` in :mod:`transport`.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Environment variables srun reads as defaults for options we set explicitly;
#: inherited from the batch script's own allocation they would contradict the
#: pair step's shape ("can't honor --ntasks-per-node", "more processors...").
SRUN_INPUT_VARS = (
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
    "SLURM_CPUS_PER_TASK", "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_GPU", "SLURM_MEM_PER_NODE",
    "SLURM_GPUS_PER_TASK", "SLURM_TRES_PER_TASK", "SLURM_DISTRIBUTION", "SLURM_NNODES",
    "SLURM_NODELIST", "SLURM_EXCLUSIVE", "SLURM_OVERCOMMIT",
)


@dataclass(frozen=True)
class StepShape:
    """How each test step is launched; the same for every group of a check."""

    backend: str
    tasks_per_node: int
    gpus_per_node: int
    timeout_s: float
    startup_s: float
    size_mb: float
    iters: int
    job_id: str | None
    python: str = sys.executable


def srun_test_argv(group: Sequence[str], *, port: int, master: str, shape: StepShape) -> list[str]:
    """``srun`` running the allgather worker on ``group``, as a step of ``shape.job_id``.

    Inside an allocation the step uses ``--overlap``: without it a second step
    on a node waits ("Requested nodes are busy") until the first ends; with it
    concurrent steps share CPUs, memory and GPUs (verified on Slurm 22.05 with
    two ``--gpus-per-node=2`` steps on one node of a 2-GPU job). ``--overcommit``
    allows ``G`` tasks per node where the job holds fewer CPUs ("More processors
    requested than permitted" otherwise). Without a job id srun makes a one-off
    allocation per group (verified: ``sacme healthcheck --nodes`` outside a job).
    """
    nodes = len(group)
    argv = ["srun"]
    if shape.job_id:
        argv += [f"--jobid={shape.job_id}", "--overlap"]
    else:
        minutes = max(1, math.ceil((shape.startup_s + shape.timeout_s) / 60) + 1)
        argv += [f"--time={minutes}", "--job-name=acme-health"]
    argv += [
        f"--nodes={nodes}", f"--nodelist={','.join(group)}",
        f"--ntasks={nodes * shape.tasks_per_node}", f"--ntasks-per-node={shape.tasks_per_node}",
        "--cpus-per-task=1", "--overcommit", "--mem=0", "--kill-on-bad-exit=1", "--export=ALL",
        "--quiet",
    ]
    if shape.backend == "nccl" and shape.gpus_per_node:
        argv.append(f"--gpus-per-node={shape.gpus_per_node}")
    argv += [
        shape.python, "-m", "slurm_acme.health.worker",
        "--port", str(port), "--master", master, "--backend", shape.backend,
        "--size-mb", f"{shape.size_mb:g}", "--iters", str(shape.iters),
        "--timeout", f"{shape.timeout_s:g}", "--startup-s", f"{shape.startup_s:g}",
    ]
    return argv


def srun_precheck_argv(nodes: Sequence[str], *, job_id: str | None, expect_gpus: int | None,
                       python: str = sys.executable, timeout_s: float = 60.0) -> list[str]:
    """One step with one task per node running the node-local pre-checks."""
    argv = ["srun"]
    if job_id:
        argv += [f"--jobid={job_id}", "--overlap"]
    else:
        argv += [f"--time={max(1, math.ceil(timeout_s / 60) + 1)}", "--job-name=acme-health"]
    argv += [f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}", f"--ntasks={len(nodes)}",
             "--ntasks-per-node=1", "--cpus-per-task=1", "--overcommit", "--mem=0",
             "--export=ALL", "--quiet", python, "-m", "slurm_acme.health.precheck"]
    if expect_gpus is not None:
        argv += ["--expect-gpus", str(expect_gpus)]
    return argv


def srun_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the variables that would override a step's explicit shape."""
    return {k: v for k, v in environ.items() if k not in SRUN_INPUT_VARS}


def show_node_argv(nodes: Sequence[str]) -> list[str]:
    return ["scontrol", "-o", "show", "node", ",".join(nodes)]


_NODE_LINE = re.compile(r"NodeName=(\S+).*?\bNodeAddr=(\S+)")


def parse_node_addresses(text: str) -> dict[str, str]:
    """``scontrol -o show node`` -> {node name: NodeAddr}."""
    found = {}
    for line in text.splitlines():
        match = _NODE_LINE.search(line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


_GPU_TRES = re.compile(r"gres[:/]gpu(?::[^:=,\s]+)?[:=](\d+)")


def gpus_per_node_of(tres_per_node: str) -> int | None:
    """GPUs per node from a job's ``TresPerNode`` (``gres:gpu:8``, ``gres/gpu:a100=4``)."""
    match = _GPU_TRES.search(tres_per_node or "")
    return int(match.group(1)) if match else None
