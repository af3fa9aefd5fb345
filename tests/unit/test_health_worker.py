"""The worker for real: two gloo ranks on this machine, no Slurm."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from slurm_acme.health.transport import PortPicker
from slurm_acme.health.worker import busbw_gbps


def test_busbw_follows_nccl_tests_for_allgather() -> None:
    assert busbw_gbps(8 * 10**9, 1.0, 8) == pytest.approx(7.0)
    assert busbw_gbps(10**9, 0.5, 2) == pytest.approx(1.0)
    assert busbw_gbps(10**9, 1.0, 1) == 0.0


def run_world(fault: str = "") -> list[list[dict]]:  # raise/hang: tests/integration
    """Two worker processes as node-a (rank 0) and node-b (rank 1); each one's events."""
    port = PortPicker()()
    procs = []
    for rank, node in enumerate(("node-a", "node-b")):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "SLURMD_NODENAME": node,
               "ACME_HEALTH_FAULT": fault}
        argv = [sys.executable, "-m", "slurm_acme.health.worker", "--port", str(port),
                "--master", "127.0.0.1", "--backend", "gloo", "--size-mb", "1",
                "--timeout", "60"]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env))
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    return [[json.loads(line) for line in out.splitlines() if line.startswith("{")]
            for out in outputs]


def test_two_ranks_gather_and_rank0_reports_bus_bandwidth() -> None:
    rank0, rank1 = run_world()
    assert [e["event"] for e in rank0] == ["ready", "result"]
    assert [e["event"] for e in rank1] == ["ready"]
    result = rank0[-1]
    assert result["world"] == 2 and result["backend"] == "gloo"
    assert result["busbw_gbps"] == pytest.approx(result["algbw_gbps"] / 2)
    assert result["busbw_gbps"] > 0
