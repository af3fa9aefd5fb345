"""Fault scenarios with real collector processes, the real hooks and real Postgres.

Each node collector is ``sbin/acme-collectd`` in its own session, as the hooks
start it; hooks run as slurmd runs them (bare environment). Nodes are named
``tN`` so they never meet the shared test cluster's collectors.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from slurm_acme.store import open_store
from slurm_acme.store import telemetry as tstore

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.25)


class Site:
    """A config, a spool folder and the collector processes this test started."""

    def __init__(self, root: Path, store_url: str) -> None:
        self.root = root
        self.store_url = store_url
        self.spool = root / "spool"
        self.conf = root / "etc" / "acme.toml"
        self.conf.parent.mkdir(parents=True)
        (root / "etc" / "slurm.conf").write_text("")
        self.conf.write_text(
            f'[store]\nurl = "{store_url}"\n[cluster]\nname = "faults"\n'
            f'[telemetry]\nspool_dir = "{self.spool}"\ninterval_s = 0.5\n'
            f'flush_interval_s = 1\nsynthetic_gpus = 8\nsamplers = ["host"]\n')
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, node: str) -> subprocess.Popen:
        log = self.spool / node / "collectd.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        before = self.spool_counts(node)["node_samples"]
        proc = subprocess.Popen([str(REPO / "sbin" / "acme-collectd"), "--node", node,
                                 "--log-file", str(log)],
                                env={**os.environ, "ACME_CONF": str(self.conf)},
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs[node] = proc
        wait_for(lambda: self.spool_counts(node)["node_samples"] > before, 90, f"{node}'s first sample")
        return proc

    def hook(self, kind: str, node: str, job: str, **env: str) -> int:
        path = REPO / ("prolog/acme-prolog" if kind == "prolog" else "epilog/acme-epilog")
        full = {"SLURM_JOB_ID": job, "SLURMD_NODENAME": node, "SLURM_JOB_USER": "alice",
                "SLURM_CONF": str(self.root / "etc" / "slurm.conf"),
                "SLURM_SCRIPT_CONTEXT": f"{kind}_slurmd", **env}
        return subprocess.run([str(path)], env=full, timeout=30, check=False).returncode

    def spool_counts(self, node: str) -> dict[str, int]:
        db = self.spool / node / "spool.db"
        if not db.exists():
            return {"node_samples": 0, "gpu_samples": 0, "job_nodes": 0}
        with sqlite3.connect(db, timeout=30) as conn:
            try:
                return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                        for t in ("node_samples", "gpu_samples", "job_nodes")}
            except sqlite3.OperationalError:
                return {"node_samples": 0, "gpu_samples": 0, "job_nodes": 0}

    def log_tail(self, node: str, lines: int = 30) -> str:
        """The end of a collector's log, for a failure message."""
        log = self.spool / node / "collectd.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"

    def central(self) -> dict[str, int]:
        store = open_store(self.store_url)
        try:
            return tstore.count_rows(store, "faults")
        finally:
            store.dispose()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def site(tmp_path, pg_url) -> Iterator[Site]:
    s = Site(tmp_path, pg_url)
    try:
        yield s
    finally:
        s.stop_all()


def set_reachable(pg_url: str, reachable: bool) -> None:
    """Make the test database refuse (or accept again) every connection."""
    name = pg_url.rsplit("/", 1)[1]
    admin = pg_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(reachable).lower()}')
        if not reachable:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))


def test_store_down_spools_and_flushes_everything_later(site, pg_url):
    site.start("t1")
    set_reachable(pg_url, False)
    try:
        assert site.hook("prolog", "t1", "500", SLURM_JOB_GPUS="2,3") == 0
        time.sleep(2.5)
        assert site.hook("epilog", "t1", "500", SLURM_JOB_GPUS="2,3",
                         SLURM_JOB_EXIT_CODE2="0:0") == 0
        wait_for(lambda: site.spool_counts("t1")["job_nodes"] == 1, 30, "the job row in the spool")
        time.sleep(2)  # several failed flush attempts while the store is down
    finally:
        set_reachable(pg_url, True)
    site.procs["t1"].send_signal(signal.SIGTERM)  # a clean stop flushes what is left
    code = site.procs["t1"].wait(timeout=60)
    spool = site.spool_counts("t1")
    central = site.central()
    assert code == 0, f"the collector died (exit {code}): {site.log_tail('t1')}"
    assert central["node_samples"] == spool["node_samples"] > 0, site.log_tail("t1")
    assert central["gpu_samples"] == spool["gpu_samples"] == 8 * spool["node_samples"]
    store = open_store(pg_url)
    try:
        summary = tstore.job_summary(store, "faults", "500")
        rows = tstore.job_rows(store, "faults", "500")
    finally:
        store.dispose()
    assert summary is not None and summary["gpus"] == 2 and summary["n_gpu_samples"] >= 2
    assert {r["gpu_index"] for r in rows["gpu_samples"]} == {2, 3}
    log = (site.spool / "t1" / "collectd.log").read_text()
    assert "central store unavailable, spooling locally" in log
    assert log.count("central store unavailable") == 1  # said once, not every attempt


def test_kill_9_loses_at_most_the_current_interval_and_corrupts_nothing(site):
    proc = site.start("t2")
    wait_for(lambda: site.central()["node_samples"] >= 3, 60, "flushed samples")
    time.sleep(1.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = time.time()
    db = site.spool / "t2" / "spool.db"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        last_tick = conn.execute("SELECT max(ts) FROM node_samples").fetchone()[0]
        before = conn.execute("SELECT count(*) FROM node_samples").fetchone()[0]
    assert killed_at - last_tick <= 0.5 + 1.0  # at most the interval in progress (plus slack)
    site.start("t2")  # the restarted collector takes over the same spool
    site.procs["t2"].send_signal(signal.SIGTERM)
    site.procs["t2"].wait(timeout=60)
    with sqlite3.connect(db) as conn:
        after = conn.execute("SELECT count(*) FROM node_samples").fetchone()[0]
        timestamps = [r[0] for r in conn.execute("SELECT ts FROM node_samples ORDER BY ts")]
    assert after > before and len(set(timestamps)) == len(timestamps)
    assert site.central()["node_samples"] == after


def test_64_jobs_ending_at_once_on_8_nodes_lose_no_row(site):
    nodes = [f"t{i}" for i in range(10, 18)]
    for node in nodes:
        site.start(node)
    jobs = {node: [str(1000 + 8 * n + k) for k in range(8)] for n, node in enumerate(nodes)}

    def hooks(kind: str) -> None:
        procs = []
        for node in nodes:
            for k, job in enumerate(jobs[node]):
                path = REPO / ("prolog/acme-prolog" if kind == "prolog" else "epilog/acme-epilog")
                env = {"SLURM_JOB_ID": job, "SLURMD_NODENAME": node, "SLURM_JOB_GPUS": str(k),
                       "SLURM_CONF": str(site.root / "etc" / "slurm.conf"),
                       "SLURM_JOB_EXIT_CODE2": f"{k % 2}:0"}
                procs.append(subprocess.Popen([str(path)], env=env))
        assert [p.wait(timeout=60) for p in procs] == [0] * 64

    hooks("prolog")
    time.sleep(2)
    hooks("epilog")  # 64 epilogs at once
    wait_for(lambda: site.central()["job_summaries"] == 64, 120, "64 job summaries")
    site.stop_all()
    central = site.central()
    spool = {k: sum(site.spool_counts(n)[k] for n in nodes) for k in ("node_samples", "gpu_samples")}
    assert central["node_samples"] == spool["node_samples"]
    assert central["gpu_samples"] == spool["gpu_samples"]
    assert central["job_nodes"] == 64 and central["job_summaries"] == 64
    store = open_store(site.store_url)
    try:
        for node in nodes:
            for k, job in enumerate(jobs[node]):
                summary = tstore.job_summary(store, "faults", job)
                assert summary["nodes"] == node and summary["exit_code"] == k % 2
                assert summary["n_gpu_samples"] >= 1 and summary["gpus"] == 1
    finally:
        store.dispose()
