"""The shapes of the health check's srun steps, as requests to the Slurm door.

This module decides what each step asks for (nodes, tasks, sharing, the
worker command); :mod:`slurm_acme.slurm.steps` alone turns a request into
srun's argument list and launches it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from slurm_acme.slurm.steps import StepRequest


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


class _Placement(TypedDict, total=False):
    """Where a step runs: the :class:`StepRequest` fields that say so."""

    job_id: str
    overlap: bool
    time_limit: str
    job_name: str


def _placement(job_id: str | None, minutes: int) -> _Placement:
    """Inside an allocation: join it and overlap; outside: a small one-off allocation."""
    if job_id:
        return {"job_id": job_id, "overlap": True}
    return {"time_limit": str(minutes), "job_name": "acme-health"}


def pair_test_step(group: Sequence[str], *, port: int, master: str,
              shape: StepShape) -> tuple[StepRequest, list[str]]:
    """The step (request, command) running the allgather worker on ``group`` for ``shape.job_id``.

    Inside an allocation the step uses ``--overlap``: without it a second step
    on a node waits ("Requested nodes are busy") until the first ends; with it
    concurrent steps share CPUs, memory and GPUs (verified on Slurm 22.05 with
    two ``--gpus-per-node=2`` steps on one node of a 2-GPU job). ``--overcommit``
    allows ``G`` tasks per node where the job holds fewer CPUs ("More processors
    requested than permitted" otherwise). Without a job id srun makes a one-off
    allocation per group (verified: ``sacme healthcheck --nodes`` outside a job).
    """
    nodes = len(group)
    minutes = max(1, math.ceil((shape.startup_s + shape.timeout_s) / 60) + 1)
    request = StepRequest(
        **_placement(shape.job_id, minutes),
        nodes=nodes, nodelist=tuple(group), ntasks=nodes * shape.tasks_per_node,
        ntasks_per_node=shape.tasks_per_node, cpus_per_task=1, overcommit=True, mem="0",
        kill_on_bad_exit=True, export="ALL", quiet=True,
        gpus_per_node=shape.gpus_per_node if shape.backend == "nccl" and shape.gpus_per_node else None,
    )
    command = [
        shape.python, "-m", "slurm_acme.health.worker",
        "--port", str(port), "--master", master, "--backend", shape.backend,
        "--size-mb", f"{shape.size_mb:g}", "--iters", str(shape.iters),
        "--timeout", f"{shape.timeout_s:g}", "--startup-s", f"{shape.startup_s:g}",
    ]
    return request, command


def precheck_step(nodes: Sequence[str], *, job_id: str | None, expect_gpus: int | None,
                  python: str = sys.executable, timeout_s: float = 60.0) -> tuple[StepRequest, list[str]]:
    """One step with one task per node running the node-local pre-checks."""
    request = StepRequest(
        **_placement(job_id, max(1, math.ceil(timeout_s / 60) + 1)),
        nodes=len(nodes), nodelist=tuple(nodes), ntasks=len(nodes), ntasks_per_node=1,
        cpus_per_task=1, overcommit=True, mem="0", export="ALL", quiet=True,
    )
    command = [python, "-m", "slurm_acme.health.precheck"]
    if expect_gpus is not None:
        command += ["--expect-gpus", str(expect_gpus)]
    return request, command


