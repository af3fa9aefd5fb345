"""``sacme diagnose`` on the real output of failed multi-node jobs on the local Slurm."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

#: Rank 1 fails; rank 0 keeps logging steps, as survivors do.
PROGRAM = r'''
import os, sys, time
rank = int(os.environ["SLURM_PROCID"])
node = os.environ["SLURMD_NODENAME"]
for step in range(5):
    print(f"[rank{rank}]: iteration {step}/100 | lm loss: {2.5 - step * 0.1:.3f} | grad norm: 0.8 |", flush=True)
    time.sleep(0.2)
if rank == 1:
    if sys.argv[1] == "keyerror":
        cfg = {}
        cfg["tokens"]
    print(f"{node}:{os.getpid()}:{os.getpid() + 7} [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : "
          "Got completion from peer 10.0.0.2<53249> with error 12, opcode 0, len 0, vendor err 129", flush=True)
    raise RuntimeError("NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
                       "unhandled system error, NCCL version 2.14.3")
time.sleep(1)
'''


def run_failing_job(slurm, wait_job, tmp_path: Path, mode: str) -> Path:  # type: ignore[no-untyped-def]
    program = tmp_path / "fail.py"
    program.write_text(PROGRAM)
    out = tmp_path / "job.out"
    script = (f"#!/bin/sh\nsrun -l {shlex.quote(sys.executable)} {shlex.quote(str(program))} {mode}\n")
    job_id = slurm.sbatch(["-N", "2", "--ntasks-per-node=1", "-t", "2", "-J", f"diag-{mode}",
                           "-D", str(tmp_path), "-o", str(out)], script)
    wait_job(slurm, job_id, timeout=120)
    return out


def sacme_diagnose(log: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "diagnose", "--no-store", "--json", str(log)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_key_error_on_one_rank_is_a_script_error_to_stop(slurm, wait_job, tmp_path):  # type: ignore[no-untyped-def]
    out = run_failing_job(slurm, wait_job, tmp_path, "keyerror")
    verdict = sacme_diagnose(out)
    assert (verdict["category"], verdict["origin"], verdict["action"]) == ("KeyError", "script", "stop"), out.read_text()
    assert verdict["evidence"][0].startswith("1: KeyError")


def test_nccl_system_error_names_the_failing_node(slurm, slurm_cluster, wait_job, tmp_path):  # type: ignore[no-untyped-def]
    out = run_failing_job(slurm, wait_job, tmp_path, "nccl")
    verdict = sacme_diagnose(out)
    assert (verdict["origin"], verdict["action"]) == ("infrastructure", "requeue_exclude_node"), out.read_text()
    assert verdict["node"] in slurm_cluster.nodes
