"""Bad nodes leave the pool: the node-health ledger and the drain policy on the real cluster.

Real Slurm (``scontrol`` drains and resumes), the real ``sacme`` CLI, a real
SQLite store; the only fake is the NVML module the node collector talks to.
The drain policy is read from a root-owned system config (``$ACME_SYSTEM_CONF``,
honoured for root only). Every node a test drains is resumed when it ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from nvml_fake import FakeNvml
from osusers import ensure_user, run_as

from slurm_acme.config import NodesConfig
from slurm_acme.store import nodes as ledger
from slurm_acme.store import open_store
from slurm_acme.telemetry.collector import Collector
from slurm_acme.telemetry.nvml import NvmlSampler
from slurm_acme.telemetry.settings import CollectorSettings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

POLICY = "[nodes]\ndrain = true\nmax_drained_share = 0.25\nevents_to_drain = 2\nwindow_hours = 24\n"
NVLINK_JOB = """#!/bin/sh
echo "[rank1]: $SLURMD_NODENAME: NCCL WARN NVLink error detected on link 2: NVLink fatal error"
echo "srun: error: $SLURMD_NODENAME: task 1: Exited with exit code 1"
exit 1
"""


@pytest.fixture
def site(tmp_path, slurm_cluster, slurm):  # type: ignore[no-untyped-def]
    """A store, a root-owned system config with the drain policy on, and every node
    back in service afterwards."""
    assert os.geteuid() == 0, "the drain tests run as root (make test does)"
    system = tmp_path / "etc" / "acme.toml"
    system.parent.mkdir(mode=0o755)
    system.write_text(POLICY)
    system.chmod(0o644)
    env = {**slurm_cluster.env, "ACME_SYSTEM_CONF": str(system)}
    url = f"sqlite:///{tmp_path / 'acme.db'}"
    store = open_store(url)
    try:
        yield store, url, env
    finally:
        store.dispose()
        for node in slurm.show_nodes():
            if node.drained:
                slurm.resume_node(node.name)


def sacme(url: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_acme", "--db", url, *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def node_state(slurm, name: str):  # type: ignore[no-untyped-def]
    return next(n for n in slurm.show_nodes([name]))


def decisive(node: str, job: str) -> ledger.NodeEvent:
    return ledger.NodeEvent(cluster="acme", node=node, ts=time.time(), source="hardware",
                            category="NodeFailure", code="xid:79", gpu_index=0, job_id=job,
                            evidence=(f"{node} GPU 0: Xid 79",))


def test_nvlink_errors_twice_on_node3_drain_it_and_the_next_job_lands_elsewhere(
        site, slurm, wait_job, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _store, url, env = site
    script = tmp_path / "nvlink.sh"
    script.write_text(NVLINK_JOB)
    jobs = []
    for _ in range(2):
        job_id = slurm.sbatch(["-w", "node3", "-o", str(tmp_path / "job-%j.out")], script)
        wait_job(slurm, job_id)
        diagnosed = sacme(url, env, "diagnose", str(tmp_path / f"job-{job_id}.out"), "--job-id", job_id)
        assert diagnosed.returncode == 0 and "NVLinkError" in diagnosed.stdout and "node=node3" in diagnosed.stdout
        jobs.append(job_id)
    assert not node_state(slurm, "node3").drained

    done = sacme(url, env, "nodes", "reconcile", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["drained"] == ["node3"]
    node3 = node_state(slurm, "node3")
    assert node3.drained and node3.reason == f"acme: NVLinkError job {jobs[1]} (2 in 24h)"

    nxt = slurm.sbatch(["-N", "3", "-o", "/dev/null"], "#!/bin/sh\ntrue\n")
    finished = wait_job(slurm, nxt)
    landed = slurm.show_hostnames(finished.nodelist)
    assert len(landed) == 3 and "node3" not in landed

    listing = json.loads(sacme(url, env, "nodes", "--json").stdout)
    row = next(r for r in listing["nodes"] if r["node"] == "node3")
    assert row["events"] == 2 and "DRAIN" in row["state"] and row["reason"].startswith("acme: NVLinkError")


def test_a_decisive_xid_seen_by_node3s_collector_drains_it_after_one_event(site, slurm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store, url, _ = site
    base = CollectorSettings.build("acme", "node3", url, spool_dir=tmp_path / "spool", interval_s=10.0)
    settings = replace(base, nodes=NodesConfig(drain=True, max_drained_share=0.25))
    nvml = FakeNvml()
    nvml.dbe[0] = 0  # no ECC errors: the XID alone
    collector = Collector(settings, samplers=[NvmlSampler(nvml)], gpu_resolver=lambda job, node: None)
    collector.start()
    try:
        collector.tick(time.time())
        collector.flush()
        assert not node_state(slurm, "node3").drained
        nvml.pending_xids = [(0, 79)]
        collector.tick(time.time())
        collector.flush()
    finally:
        collector.close()
    node3 = node_state(slurm, "node3")
    assert node3.drained and node3.reason == "acme: NodeFailure job none (1 in 24h)"
    [action] = ledger.list_actions(store)
    assert (action.node, action.action, action.by_user) == ("node3", "drain", "root")


def test_the_share_cap_holds_when_every_node_reports_at_once(site, slurm) -> None:  # type: ignore[no-untyped-def]
    store, url, env = site
    ledger.record_events(store, [decisive(f"node{i}", str(100 + i)) for i in range(1, 5)])
    procs = [subprocess.Popen([sys.executable, "-m", "slurm_acme", "--db", url, "nodes", "reconcile",
                               "--node", f"node{i}", "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for i in range(1, 5)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    drained = [n.name for n in slurm.show_nodes() if n.drained]
    assert len(drained) == 1, drained
    held = sum(len(json.loads(out)["held_by_cap"]) for out, _ in outs)
    assert held == 3


def test_a_dry_run_drains_nothing_and_says_why_it_would(site, slurm) -> None:  # type: ignore[no-untyped-def]
    store, url, env = site
    ledger.record_events(store, [decisive("node3", "77")])
    out = sacme(url, env, "nodes", "reconcile", "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert [d["node"] for d in plan["drain"]] == ["node3"] and plan["drained"] == []
    assert plan["drain"][0]["reason"] == "acme: NodeFailure job 77 (1 in 24h)"
    assert not node_state(slurm, "node3").drained
    assert ledger.list_actions(store) == []


def test_resume_returns_the_node_and_records_who(site, slurm) -> None:  # type: ignore[no-untyped-def]
    store, url, env = site
    ledger.record_events(store, [decisive("node3", "78")])
    assert sacme(url, env, "nodes", "reconcile").returncode == 0
    assert node_state(slurm, "node3").drained
    resumed = sacme(url, env, "nodes", "resume", "node3", "--reason", "GPU reseated")
    assert resumed.returncode == 0, resumed.stderr
    assert not node_state(slurm, "node3").drained
    shown = json.loads(sacme(url, env, "nodes", "show", "node3", "--json").stdout)
    assert [(a["action"], a["by_user"]) for a in shown["actions"]] == [("drain", "root"), ("resume", "root")]
    assert shown["actions"][1]["reason"] == "GPU reseated" and shown["would_drain"] is None
    again = sacme(url, env, "nodes", "reconcile", "--json")  # the old event no longer counts
    assert json.loads(again.stdout)["drained"] == [] and not node_state(slurm, "node3").drained


def test_a_user_who_is_not_root_cannot_drain(site, slurm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store, url, env = site
    ledger.record_events(store, [decisive("node3", "79")])
    user = ensure_user("acme-sec-nodes")
    env = {k: v for k, v in env.items() if k in ("SLURM_CONF", "PATH", "ACME_SYSTEM_CONF")}
    for args in (("nodes", "reconcile"), ("nodes", "resume", "node3")):
        proc = run_as(user, "sacme", "--db", url, *args, env=env)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and "only root may" in proc.stderr
    assert not node_state(slurm, "node3").drained
    assert ledger.list_actions(store) == []
