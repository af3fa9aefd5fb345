"""A real job on the local Slurm cluster, through the real hooks and node collectors,
into the cluster's store (acme.toml beside slurm.conf, written by sbin/acme-cluster)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from slurm_acme.config import load_config
from slurm_acme.slurm import JobState, run_slurm
from slurm_acme.store import open_store
from slurm_acme.store import telemetry as tstore

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def wait_for(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)
    return value


def collector_alive(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text().split()[0])
        return b"collectd" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return False


@pytest.fixture(scope="module")
def cluster_telemetry(slurm_cluster):  # type: ignore[no-untyped-def]
    """The cluster's telemetry config, with every node's collector running and sampling.

    The hooks would start a missing collector at the first job; starting them
    here (the same way, detached) means the test job is sampled from its start.
    """
    conf = slurm_cluster.dir / "etc" / "acme.toml"
    config = load_config(conf)
    assert config.telemetry.synthetic_gpus == slurm_cluster.gpus_per_node
    spool = Path(config.telemetry.spool_dir)
    for node in slurm_cluster.nodes:
        node_dir = spool / node
        if collector_alive(node_dir / "collectd.pid"):
            continue
        node_dir.mkdir(parents=True, exist_ok=True)
        subprocess.Popen([str(REPO / "sbin" / "acme-collectd"), "--node", node,
                          "--log-file", str(node_dir / "collectd.log")],
                         env={**slurm_cluster.env, "ACME_CONF": str(conf)},
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    started = time.time()
    for node in slurm_cluster.nodes:
        node_dir = spool / node
        wait_for(lambda d=node_dir: latest_spool_tick(d) > started, 120, f"{node}'s collector")
    return config


def latest_spool_tick(node_dir: Path) -> float:
    import sqlite3

    try:
        with sqlite3.connect(node_dir / "spool.db", timeout=30) as conn:
            return conn.execute("SELECT max(ts) FROM node_samples").fetchone()[0] or 0.0
    except sqlite3.Error:
        return 0.0


def allocated_gpus(job_id: str) -> dict[str, set[int]]:
    """node -> GPU indices, read independently from `scontrol -d show job` while it runs."""
    text = run_slurm(["scontrol", "-d", "show", "job", job_id], timeout=30)
    out = {}
    for nodes, idx in re.findall(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=gpu:\d+\(IDX:([\d,-]+)\)", text):
        hosts = run_slurm(["scontrol", "show", "hostnames", nodes], timeout=30).split()
        indices = set()
        for part in idx.split(","):
            lo, _, hi = part.partition("-")
            indices.update(range(int(lo), int(hi or lo) + 1))
        out.update({h: indices for h in hosts})
    return out


@pytest.fixture(scope="module")
def finished_job(cluster_telemetry, slurm_cluster, wait_job, tmp_path_factory):  # type: ignore[no-untyped-def]
    from slurm_acme.slurm import Slurm

    slurm = Slurm(timeout=60)
    workdir = tmp_path_factory.mktemp("telemetry-job")
    job_id = slurm.sbatch(["-N", "2", "--gpus-per-node=2", "-J", "telemetry probe", "-t", "3",
                           "-D", str(workdir), "-o", str(workdir / "out.txt")],
                          "#!/bin/sh\nsleep 12\n")
    gpus = wait_for(lambda: slurm.show_job(job_id).state is JobState.RUNNING
                    and allocated_gpus(job_id), 120, f"job {job_id} to run")
    job = wait_job(slurm, job_id, timeout=180)
    store = open_store(cluster_telemetry.store.url)
    try:
        wait_for(lambda: (s := tstore.job_summary(store, "acme", job_id)) is not None
                 and "nodes_still_running" not in (s["flags"] or ""), 120, "the job summary")
        rows = tstore.job_rows(store, "acme", job_id)
        summary = tstore.job_summary(store, "acme", job_id)
    finally:
        store.dispose()
    return job, gpus, rows, summary


def test_job_start_and_end_are_in_the_store_for_each_node(finished_job):
    job, gpus, rows, _ = finished_job
    assert job.state is JobState.COMPLETED
    by_node = {r["node"]: r for r in rows["job_nodes"]}
    assert set(by_node) == set(gpus) and len(by_node) == 2
    for row in by_node.values():
        assert row["start_ts"] is not None and row["end_ts"] > row["start_ts"]
        assert row["exit_code"] == 0 and row["user"] == "root"


def test_psutil_samples_exist_on_each_node_of_the_job(finished_job):
    _, gpus, rows, _ = finished_job
    sampled = {r["node"] for r in rows["node_samples"] if r["cpu_percent"] is not None
               and r["mem_percent"] is not None}
    assert sampled == set(gpus)


def test_synthetic_gpu_samples_are_attributed_to_the_allocated_gpus(finished_job):
    _, gpus, rows, _ = finished_job
    attributed = {(r["node"], r["gpu_index"]) for r in rows["gpu_samples"]}
    assert attributed == {(node, i) for node, indices in gpus.items() for i in indices}
    assert all(r["source"] == "synthetic" and "synthetic" in r["flags"] for r in rows["gpu_samples"])
    assert all(r["util_percent"] >= 80 for r in rows["gpu_samples"])


def test_per_job_summary_is_written(finished_job):
    _, gpus, rows, summary = finished_job
    assert summary["nodes"] == ",".join(sorted(gpus)) and summary["gpus"] == 4
    assert summary["exit_code"] == 0 and summary["n_gpu_samples"] == len(rows["gpu_samples"])
    assert summary["gpu_util_mean"] >= 80 and summary["gpu_energy_j"] > 0
    assert 0 < summary["coverage"] <= 1
    assert "synthetic" in summary["flags"].split(",")
