"""The in-job supervisor's loop with fakes only at its boundaries.

The training command really runs (a small Python program standing in for
srun's output); Slurm, the health check and the requeue helper are fakes.
Diagnosis is the real ``slurm_acme.diagnose``.
"""

from __future__ import annotations

import json

import pytest
from ft_fakes import make

from slurm_acme import exitcodes
from slurm_acme.ft.checkpoints import Checkpoint
from slurm_acme.ft.supervisor import JobContext
from slurm_acme.health.records import HealthReport
from slurm_acme.store import runs as rs


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)


def test_clean_run_completes_and_is_recorded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, spawns = make(tmp_path, "for s in range(1, 4): metric('step', s)\nmetric('done', 3)\n")
    assert sup.run() == exitcodes.OK
    attempt = rs.list_attempts(store, "r1")[0]
    assert (attempt.outcome, attempt.last_step) == ("completed", 3)
    assert rs.get_run(store, "r1").state == "COMPLETED"
    assert spawns.calls == []


def test_key_error_stops_with_diagnosis_and_no_requeue(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, spawns = make(tmp_path, "metric('step', 1)\nbatch = {}\nbatch['input_ids']\n")
    assert sup.run() == exitcodes.SUPERVISOR_STOP
    attempt = rs.list_attempts(store, "r1")[0]
    failure = rs.get_failures(store, [attempt.failure_id])[attempt.failure_id]
    assert attempt.outcome == "stop"
    assert (failure.category, failure.origin) == ("KeyError", "script")
    assert spawns.calls == []
    assert rs.get_run(store, "r1").state == "STOPPED"


def test_nccl_error_requeues_through_the_helper(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, spawns = make(tmp_path, "metric('step', 1)\n"
                              "raise RuntimeError('NCCL error: unhandled system error')\n")
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    assert spawns.calls and spawns.calls[0]["mode"] == "requeue"
    attempt = rs.list_attempts(store, "r1")[0]
    assert attempt.outcome == "requeue"
    assert rs.get_failures(store, [attempt.failure_id])[attempt.failure_id].origin == "infrastructure"


def test_hang_is_detected_within_hang_timeout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, spawns = make(tmp_path, "metric('step', 1)\ntime.sleep(60)\n")
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    attempt = rs.list_attempts(store, "r1")[0]
    assert attempt.details["hang_detected_after_s"] <= 2 + 1.0
    assert attempt.end_ts - attempt.start_ts < 20
    assert spawns.calls[0]["mode"] == "requeue"


def test_spike_rolls_back_past_tainted_checkpoint_and_skips(tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = ("for s in range(1, 8): metric('step', s)\n"
            "metric('spike', 7)\nsys.exit(75)\n")
    sup, store, _ = make(tmp_path, body)
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    first = rs.list_attempts(store, "r1")[0]
    assert (first.outcome, first.details["rollback_before"], first.details["add_skip"]) == ("rollback", 7, "7-7")
    # attempt 1: the step-5 checkpoint is clean, the step-7 one was written before the rollback
    cks = [Checkpoint(5, str(tmp_path / "ckpt/step_5"), created_ts=1.0),
           Checkpoint(7, str(tmp_path / "ckpt/step_7"), created_ts=2.0)]
    sup2, _, _ = make(tmp_path, "metric('done', 10)\n", attempt=1, checkpoints=cks)
    assert sup2.run() == exitcodes.OK
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["ACME_SKIP_STEPS"] == "7-7"
    assert env["ACME_RESUME_FROM"].endswith("step_5")
    second = rs.list_attempts(store, "r1")[1]
    assert (second.resumed_from_step, second.skip_steps, second.outcome) == (5, "7-7", "completed")


def test_max_restarts_stops_the_third_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = "metric('step', 1)\nraise RuntimeError('NCCL error: unhandled system error')\n"
    codes = []
    for attempt in range(3):
        sup, store, _ = make(tmp_path, body, attempt=attempt)
        codes.append(sup.run())
    assert codes == [exitcodes.SUPERVISOR_REQUEUE, exitcodes.SUPERVISOR_REQUEUE, exitcodes.SUPERVISOR_STOP]
    assert "max_restarts (2) reached" in rs.get_run(store, "r1").reason


def test_time_limit_signal_is_forwarded_then_requeued_without_counting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import threading

    body = ("import signal\n"
            "def on_usr2(*_):\n"
            "    metric('requeue', 4)\n"
            "    sys.exit(76)\n"
            "signal.signal(signal.SIGUSR2, on_usr2)\n"
            "for s in range(1, 400):\n"
            "    metric('step', s)\n"
            "    time.sleep(0.05)\n")
    sup, store, spawns = make(tmp_path, body, ft=", max_restarts: 0")
    threading.Timer(2.0, lambda: setattr(sup.signals, "usr2", True)).start()
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    attempt = rs.list_attempts(store, "r1")[0]
    assert attempt.outcome == "time_limit"
    assert attempt.last_step is not None and attempt.last_step < 399
    assert spawns.calls[0]["mode"] == "requeue"


def test_preflight_health_check_excludes_bad_node_before_launch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, spawns = make(tmp_path, "metric('done', 1)\n")
    spec = sup.spec.model_copy(update={
        "nodes": 2,
        "fault_tolerance": sup.spec.fault_tolerance.model_copy(update={"health_check": "allgather"})})
    sup.spec = spec
    sup.ctx = JobContext(**{**sup.ctx.__dict__, "nodelist": "node1,node2"})
    checked = []

    def health(nodes, **kw):  # type: ignore[no-untyped-def]
        checked.append(list(nodes))
        return HealthReport(bad_nodes=("node2",), good_nodes=("node1",), rounds=2, tests=2)

    sup.health = health
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    assert checked == [["node1", "node2"]]
    attempt = rs.list_attempts(store, "r1")[0]
    assert (attempt.outcome, attempt.excluded) == ("requeue", ["node2"])
    assert spawns.calls[0]["exclude"] == ["node2"]
    assert not (tmp_path / "env.json").exists(), "the trainer must not start on a bad allocation"


def test_preflight_health_check_records_each_bad_node_in_the_ledger(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from slurm_acme.store import nodes as ledger

    sup, store, _ = make(tmp_path, "metric('done', 1)\n")
    sup.spec = sup.spec.model_copy(update={
        "nodes": 2, "fault_tolerance": sup.spec.fault_tolerance.model_copy(update={"health_check": "allgather"})})
    sup.ctx = JobContext(**{**sup.ctx.__dict__, "nodelist": "node1,node2,node3"})
    sup.health = lambda nodes, **kw: HealthReport(bad_nodes=("node2", "node3"), good_nodes=("node1",),
                                                  rounds=2, tests=3)
    sup.run()
    got = [(e.node, e.source, e.job_id) for e in ledger.list_events(store)]
    assert got == [("node2", "health", "42"), ("node3", "health", "42")]


def test_a_new_attempt_keeps_off_a_node_with_a_recent_decisive_event(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import time

    from slurm_acme.config import NodesConfig
    from slurm_acme.store import nodes as ledger

    sup, store, spawns = make(tmp_path, "metric('done', 1)\n")
    sup.node_policy = NodesConfig()
    sup.ctx = JobContext(**{**sup.ctx.__dict__, "nodelist": "node1,node2"})
    ledger.record_events(store, [ledger.NodeEvent(cluster="acme", node="node2", ts=time.time() - 60,
                                                  source="hardware", category="NodeFailure", code="xid:79",
                                                  gpu_index=0, job_id="7")])
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    attempt = rs.list_attempts(store, "r1")[0]
    assert (attempt.outcome, attempt.excluded) == ("requeue", ["node2"])
    assert "node-health ledger" in attempt.details["reason"]
    assert spawns.calls[0]["exclude"] == ["node2"]
    assert not (tmp_path / "env.json").exists(), "the trainer must not start on a node the ledger marks"


def test_a_non_decisive_ledger_event_does_not_keep_a_node_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import time

    from slurm_acme.config import NodesConfig
    from slurm_acme.store import nodes as ledger

    sup, store, _ = make(tmp_path, "metric('done', 1)\n")
    sup.node_policy = NodesConfig()
    ledger.record_events(store, [ledger.NodeEvent(cluster="acme", node="node1", ts=time.time() - 60,
                                                  source="diagnosis", category="NVLinkError",
                                                  code="nvlink-error", job_id="7")])
    assert sup._ledger_exclusions(["node1", "node2"]) == set()
