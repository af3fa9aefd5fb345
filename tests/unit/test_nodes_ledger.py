"""The node-health ledger: its writers, the drain policy, and ``sacme nodes``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_acme.config import NodesConfig
from slurm_acme.nodes.policy import assess, decisive_nodes, plan
from slurm_acme.slurm import Slurm
from slurm_acme.slurm.parse import parse_scontrol_show_node
from slurm_acme.store import nodes as ledger
from slurm_acme.store.failures import record_failure
from slurm_acme.store.migrate import LATEST, schema_version

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "22.05"
NOW = 1_780_000_000.0
NVLINK = {"category": "NVLinkError", "origin": "infrastructure", "action": "requeue_exclude_node",
          "node": "node3", "rule_id": "nvlink-error", "evidence": ["node3: NVLink fatal error"],
          "source": "rule", "confidence": 0.95}


# ``store`` (tests/conftest.py): an empty store, on SQLite and on Postgres.


def event(node: str, ts: float, job: str | None, category: str = "NVLinkError", code: str = "nvlink-error",
          source: str = "diagnosis") -> ledger.NodeEvent:
    return ledger.NodeEvent(cluster="acme", node=node, ts=ts, source=source, category=category, code=code,
                            job_id=job)


def history(node: str, *events: ledger.NodeEvent, resumed: float | None = None) -> ledger.NodeHistory:
    actions = () if resumed is None else (ledger.NodeAction("acme", node, resumed, "resume", "fixed", "root"),)
    return ledger.NodeHistory(node=node, events=events, actions=actions)


def fixture_nodes(drained: bool = False):
    name = "scontrol_show_node_drained.txt" if drained else "scontrol_show_node.txt"
    return parse_scontrol_show_node((FIXTURES / name).read_text())


# ------------------------------------------------------------------ writers

def test_a_diagnosis_naming_a_culprit_writes_one_ledger_event(store):
    failure_id = record_failure(store, NVLINK, cluster="acme", job_id="101", gpus=16,
                                time_to_failure_s=60.0, ts=NOW)
    [e] = ledger.list_events(store)
    assert (e.node, e.source, e.category, e.code, e.job_id, e.failure_id) == (
        "node3", "diagnosis", "NVLinkError", "nvlink-error", "101", failure_id)
    assert e.evidence == ("node3: NVLink fatal error",)


@pytest.mark.parametrize("change", [{"origin": "script"}, {"node": None}, {"source": "health"}])
def test_no_ledger_event_for_a_script_failure_no_culprit_or_a_health_finding(store, change):
    record_failure(store, {**NVLINK, **change}, cluster="acme", job_id="101", ts=NOW)
    assert ledger.list_events(store) == []


def test_an_xid_in_the_evidence_becomes_the_event_code(store):
    record_failure(store, {**NVLINK, "category": "NodeFailure", "rule_id": "gpu-fallen-off-bus",
                           "evidence": ["NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus"]},
                   cluster="acme", job_id="7", ts=NOW)
    assert ledger.list_events(store)[0].code == "xid:79"


def test_the_ledger_arrives_by_migration(store):
    assert LATEST == 8 and schema_version(store) == 8
    assert ledger.count_events(store) == 0


def test_a_resend_of_the_same_hardware_event_lands_once(store):
    hw = ledger.NodeEvent(cluster="acme", node="node3", ts=NOW, source="hardware", category="NodeFailure",
                          code="xid:79", gpu_index=2)
    ledger.record_events(store, [hw])
    ledger.record_events(store, [hw])
    assert ledger.count_events(store) == 1


def test_node_losses_count_events_jobs_and_gpu_time(store):
    record_failure(store, NVLINK, cluster="acme", job_id="101", gpus=16, time_to_failure_s=600.0, ts=NOW)
    record_failure(store, NVLINK, cluster="acme", job_id="102", gpus=8, time_to_failure_s=60.0, ts=NOW + 1)
    ledger.record_events(store, [event("node3", NOW + 2, "102", source="health", code="allgather")])
    [loss] = ledger.node_losses(store, cluster="acme")
    assert (loss.node, loss.events, loss.jobs_hit) == ("node3", 3, 2)
    assert loss.gpu_time_lost_s == 16 * 600.0 + 8 * 60.0


# ------------------------------------------------------------------ policy

def test_two_events_of_two_jobs_in_the_window_drain_with_an_acme_reason():
    policy = NodesConfig(drain=True)
    verdict = assess(history("node3", event("node3", NOW - 60, "101"), event("node3", NOW, "102")), policy, NOW)
    assert verdict is not None and not verdict.decisive
    assert verdict.reason(policy) == "acme: NVLinkError job 102 (2 in 24h)"


def test_one_job_seen_twice_is_one_event():
    h = history("node3", event("node3", NOW - 60, "101"), event("node3", NOW, "101", source="health"))
    assert assess(h, NodesConfig(), NOW) is None


def test_events_outside_the_window_or_before_a_resume_do_not_count():
    policy = NodesConfig(window_hours=1)
    old = history("node3", event("node3", NOW - 7200, "101"), event("node3", NOW, "102"))
    assert assess(old, policy, NOW) is None
    resumed = history("node3", event("node3", NOW - 60, "101"), event("node3", NOW, "102"), resumed=NOW - 30)
    assert assess(resumed, NodesConfig(), NOW) is None


@pytest.mark.parametrize("code", ["xid:79", "xid:48", "xid:94", "xid:95", "ecc_dbe", "row_remap_failure",
                                  "gpu_lost"])
def test_one_decisive_event_is_enough(code):
    policy = NodesConfig()
    verdict = assess(history("node3", event("node3", NOW, "7", "NodeFailure", code, "hardware")), policy, NOW)
    assert verdict is not None and verdict.decisive
    assert verdict.reason(policy) == "acme: NodeFailure job 7 (1 in 24h)"


def test_a_non_decisive_xid_alone_is_not_enough():
    assert assess(history("node3", event("node3", NOW, "7", "XidError", "xid:13", "hardware")),
                  NodesConfig(), NOW) is None


def test_the_supervisor_keeps_off_nodes_with_recent_decisive_events_only():
    hists = {"node2": history("node2", event("node2", NOW, "7", "NodeFailure", "xid:79", "hardware")),
             "node3": history("node3", event("node3", NOW, "8")),
             "node4": history("node4", event("node4", NOW - 90000, "9", "NodeFailure", "xid:79", "hardware"))}
    assert decisive_nodes(hists, NodesConfig(), NOW) == {"node2"}


def test_the_share_cap_holds_when_every_node_reports():
    policy = NodesConfig(drain=True, max_drained_share=0.25)
    hists = {f"node{i}": history(f"node{i}", event(f"node{i}", NOW - i, str(i), "NodeFailure", "xid:79",
                                                       "hardware")) for i in range(1, 5)}
    p = plan(hists, fixture_nodes(), policy, NOW)
    assert p.cap == 1 and [v.node for v in p.drain] == ["node1"]
    assert sorted(v.node for v in p.held) == ["node2", "node3", "node4"]


def test_a_node_slurm_acme_drained_counts_against_the_cap():
    policy = NodesConfig(drain=True, max_drained_share=0.25)
    hists = {"node3": history("node3", event("node3", NOW, "1", "NodeFailure", "xid:79", "hardware"))}
    p = plan(hists, fixture_nodes(drained=True), policy, NOW)
    assert p.already == ("node4",) and p.drain == () and [v.node for v in p.held] == ["node3"]


def test_a_real_drained_node_reads_back_with_its_reason():
    node4 = {n.name: n for n in fixture_nodes(drained=True)}["node4"]
    assert node4.drained and node4.unavailable
    assert node4.reason == "acme: NVLinkError job 1234 (2 in 24h)"


# ------------------------------------------------------------------ Slurm door

class Door:
    """The runner boundary: canned ``scontrol show node`` output, every argv kept."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv, *, timeout, env=None, stdin=None):
        self.calls.append(list(argv))
        if argv[:3] == ["scontrol", "show", "node"]:
            return (FIXTURES / "scontrol_show_node.txt").read_text()
        return ""


def test_drain_and_resume_are_scontrol_updates_of_one_node():
    door = Door()
    slurm = Slurm(runner=door)
    slurm.drain_node("node3", "acme: NVLinkError job 102 (2 in 24h)")
    slurm.resume_node("node3")
    assert door.calls == [
        ["scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=acme: NVLinkError job 102 (2 in 24h)"],
        ["scontrol", "update", "NodeName=node3", "State=RESUME"]]


@pytest.mark.parametrize("node, reason", [("node[1-4]", "x"), ("-h", "x"), ("node3", "a\nb")])
def test_drain_refuses_hostlists_options_and_control_characters(node, reason):
    with pytest.raises(ValueError):
        Slurm(runner=Door()).drain_node(node, reason)


def test_reconcile_as_non_root_drains_nothing(store, monkeypatch):
    from slurm_acme.errors import AccessDenied
    from slurm_acme.nodes.reconcile import reconcile

    record_failure(store, {**NVLINK, "evidence": ["Xid 79"]}, cluster="acme", job_id="1", ts=NOW)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    door = Door()
    with pytest.raises(AccessDenied, match="only root may"):
        reconcile(store, Slurm(runner=door), NodesConfig(drain=True), "acme", dry_run=False, now=NOW)
    assert not any(c[:2] == ["scontrol", "update"] for c in door.calls)


def test_reconcile_dry_run_says_what_it_would_drain_and_drains_nothing(store):
    from slurm_acme.nodes.reconcile import reconcile

    record_failure(store, {**NVLINK, "evidence": ["Xid 79"]}, cluster="acme", job_id="1", ts=NOW)
    door = Door()
    result = reconcile(store, Slurm(runner=door), NodesConfig(drain=True, max_drained_share=0.25), "acme",
                       dry_run=True, now=NOW + 1)
    assert [v.node for v in result.plan.drain] == ["node3"]
    assert not any(c[:2] == ["scontrol", "update"] for c in door.calls)
    assert ledger.list_actions(store) == []


def test_reconcile_as_root_drains_within_the_cap_and_records_it(store, monkeypatch):
    from slurm_acme.nodes.reconcile import reconcile

    for job, node in (("1", "node3"), ("2", "node2")):
        record_failure(store, {**NVLINK, "node": node, "evidence": ["Xid 79"]}, cluster="acme", job_id=job,
                       ts=NOW)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    door = Door()
    result = reconcile(store, Slurm(runner=door), NodesConfig(drain=True, max_drained_share=0.25), "acme",
                       dry_run=False, now=NOW + 1)
    updates = [c for c in door.calls if c[:2] == ["scontrol", "update"]]
    assert len(updates) == 1 and len(result.drained) == 1 and len(result.plan.held) == 1
    [action] = ledger.list_actions(store)
    assert action.action == "drain" and action.reason.startswith("acme: NVLinkError job ")


# ------------------------------------------------------------------ config

def test_the_drain_policy_is_read_only_from_the_system_config(tmp_path, monkeypatch):
    from slurm_acme.config import TRUSTED_ONLY, ignored_grants, load_config

    assert {k for s, k in TRUSTED_ONLY if s == "nodes"} == {f.name for f in dataclasses.fields(NodesConfig)}
    mine = tmp_path / "mine.toml"
    mine.write_text("[nodes]\ndrain = true\nmax_drained_share = 1.0\n")
    monkeypatch.setattr("slurm_acme.config.SYSTEM_CONFIG", tmp_path / "absent.toml")
    monkeypatch.delenv("ACME_SYSTEM_CONF", raising=False)
    assert ignored_grants(load_config(mine)) == ["nodes.drain", "nodes.max_drained_share"]


def test_a_users_system_config_variable_is_ignored(tmp_path, monkeypatch):
    from slurm_acme.config import SYSTEM_CONFIG, system_config_path

    monkeypatch.setenv("ACME_SYSTEM_CONF", str(tmp_path / "acme.toml"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert system_config_path() == SYSTEM_CONFIG


# ------------------------------------------------------------------ CLI

def sacme(db: str, bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([sys.executable, "-m", "slurm_acme", "--db", db, *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def fake_scontrol(tmp_path: Path) -> Path:
    """Slurm's boundary: an ``scontrol`` that prints the captured drained-node listing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "scontrol"
    tool.write_text(f"#!/bin/sh\ncat {FIXTURES / 'scontrol_show_node_drained.txt'}\n")
    tool.chmod(0o755)
    return bin_dir


def test_sacme_nodes_lists_and_shows_the_ledger(store, tmp_path):
    record_failure(store, NVLINK, cluster="acme", job_id="101", ts=NOW)
    record_failure(store, NVLINK, cluster="acme", job_id="102", ts=NOW + 5)
    db, bin_dir = str(store.engine.url), fake_scontrol(tmp_path)
    listing = sacme(db, bin_dir, "nodes", "--json")
    assert listing.returncode == 0, listing.stderr
    rows = {r["node"]: r for r in json.loads(listing.stdout)["nodes"]}
    assert sorted(rows) == ["node1", "node2", "node3", "node4"]
    assert rows["node3"]["events"] == 2 and rows["node3"]["state"] == "IDLE"
    assert rows["node4"]["state"] == "IDLE+DRAIN" and rows["node4"]["reason"].startswith("acme: NVLinkError")
    shown = sacme(db, bin_dir, "nodes", "show", "node3")
    assert shown.returncode == 0, shown.stderr
    assert "NVLinkError nvlink-error job 101" in shown.stdout and "job 102" in shown.stdout
    missing = sacme(db, bin_dir, "nodes", "show", "node9")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "node 'node9': neither the ledger nor Slurm knows it" in missing.stderr


# ------------------------------------------------------------------ report

def test_the_reports_failures_section_has_a_per_node_view(store):
    from slurm_acme.report.compute import failure_section
    from slurm_acme.report.views import failures_tables
    from slurm_acme.store.report import JobFilter, read_report

    record_failure(store, NVLINK, cluster="acme", job_id="101", gpus=16, time_to_failure_s=1800.0, ts=NOW)
    record_failure(store, NVLINK, cluster="acme", job_id="102", gpus=16, time_to_failure_s=900.0, ts=NOW + 1)
    record_failure(store, {**NVLINK, "node": "node1", "category": "ECCError"}, cluster="acme", job_id="103",
                   gpus=8, time_to_failure_s=450.0, ts=NOW + 2)
    record_failure(store, {**NVLINK, "category": "KeyError", "origin": "script", "node": None}, cluster="acme",
                   job_id="104", gpus=8, time_to_failure_s=60.0, ts=NOW + 3)
    with read_report(store, JobFilter(cluster="acme")) as reader:
        section = failure_section(reader)
    assert section is not None
    assert section["by_node"] == [
        {"node": "node3", "events": 2.0, "jobs_hit": 2.0, "gpu_hours_lost": 12.0, "categories": ["NVLinkError"]},
        {"node": "node1", "events": 1.0, "jobs_hit": 1.0, "gpu_hours_lost": 1.0, "categories": ["ECCError"]}]
    by_node = failures_tables(section)[-1]
    assert by_node.rows == (("node3", "NVLinkError", "2", "2", "12.0"), ("node1", "ECCError", "1", "1", "1.0"))
