"""Scenario 4: one node's slurmd is killed mid-run (NODE_FAIL) -> the run continues elsewhere.

The cluster is shared: the killed slurmd is restarted by ``sbin/acme-cluster up``
(idempotent) in a ``finally``, and the test waits for the node to be idle again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_ft_support import REPO, fresh_dir, metrics, sacme, status, submit, wait_run, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _wait_steps(folder: Path, run_id: str, job_id: str, at_least: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            steps = [m["step"] for m in metrics(folder, run_id, 0, job_id) if m["event"] == "checkpoint"]
        except FileNotFoundError:
            steps = []
        if steps and max(steps) >= at_least:
            return {"checkpointed": max(steps)}
        time.sleep(1)
    raise AssertionError(f"attempt 0 of {run_id} never checkpointed step {at_least}")


def _restart_slurmd(cluster, node: str, slurm) -> None:  # type: ignore[no-untyped-def]
    env = {**os.environ, "ACME_CLUSTER_DIR": str(cluster.dir)}
    subprocess.run([sys.executable, str(REPO / "sbin" / "acme-cluster"), "up"], env=env,
                   capture_output=True, text=True, timeout=600, check=False)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = {n.name: n.state for n in slurm.sinfo_nodes()}.get(node, "")
        if state.rstrip("*") in ("idle", "mixed", "allocated") and not state.endswith("*"):
            return
        time.sleep(2)
    raise AssertionError(f"{node} did not come back after restarting its slurmd")


def test_killed_slurmd_node_fail_continues_elsewhere(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, sqlite_url = fresh_dir("ft-nodefail")
    # attempt 0 stalls at step 21 (after checkpointing step 20) so the node failure,
    # not the end of training, ends it; the supervisor's hang timeout is far away.
    spec = write_spec(tmp_path, "ft-nodefail", steps=30, interval=10, hang_timeout=300,
                      faults="hang:step=21,attempt=0")
    run_id, job_id = submit(sqlite_url, spec)
    _wait_steps(tmp_path, run_id, job_id, 20, timeout=240)
    first = status(sqlite_url, run_id)["attempts"][0]
    victim = first["nodes"].split(",")[1]  # not the batch host, where the supervisor runs
    pid = int((slurm_cluster.dir / "run" / f"slurmd-{victim}.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    try:
        view = wait_run(sqlite_url, run_id, job_id, slurm, timeout=300)
    finally:
        _restart_slurmd(slurm_cluster, victim, slurm)

    first, second = view["attempts"][0], view["attempts"][-1]
    assert first["outcome"] == "node_fail"
    assert victim in first["excluded"]
    assert first["diagnosis"]["category"] == "NodeFailure"
    assert first["diagnosis"]["node"] == victim
    assert victim not in second["nodes"].split(",")
    assert second["outcome"] == "completed"
    assert second["resumed_from_step"] == 20
    assert view["state"] == "COMPLETED" and view["last_step"] == 30
    text = sacme(sqlite_url, "status", run_id).stdout
    assert "node_fail" in text
