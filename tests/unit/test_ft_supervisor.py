"""The in-job supervisor's loop with fakes only at its boundaries.

The training command really runs (a small Python program standing in for
srun's output); Slurm, the health check and the requeue helper are fakes.
Diagnosis is the real ``slurm_acme.diagnose``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_acme import exitcodes
from slurm_acme.ft.deps import Checkpoint, HealthResult
from slurm_acme.ft.spec import parse_spec
from slurm_acme.ft.supervisor import JobContext, Signals, Supervisor
from slurm_acme.slurm import NodeInfo
from slurm_acme.store import open_store
from slurm_acme.store import runs as rs


class QuietSignals(Signals):
    def install(self) -> None:  # the test process keeps its own handlers
        pass


@dataclass
class FakeSlurm:
    timeout: float = 5.0

    def show_hostnames(self, hostlist: str) -> list[str]:
        return hostlist.split(",")

    def sinfo_nodes(self) -> list[NodeInfo]:
        return [NodeInfo(f"node{i}", "idle") for i in range(1, 5)]


@dataclass
class Spawns:
    calls: list[dict] = field(default_factory=list)

    def __call__(self, job_id: str, **kw: object) -> None:
        self.calls.append({"job_id": job_id, **kw})


def program(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "trainer.py"
    path.write_text("import json, os, sys, time\n"
                    "def metric(event, step):\n"
                    "    with open(os.environ['ACME_METRICS_FILE'], 'a') as f:\n"
                    "        f.write(json.dumps({'step': step, 'time': time.time(), 'event': event, 'rank': 0}) + '\\n')\n"
                    "with open('env.json', 'w') as f:\n"
                    "    json.dump({k: v for k, v in os.environ.items() if k.startswith(('ACME_', 'MASTER_'))}, f)\n"
                    + textwrap.dedent(body))
    return path


def make(tmp_path: Path, body: str, *, attempt: int = 0, ft: str = "", checkpoints=None):  # type: ignore[no-untyped-def]
    store = open_store(f"sqlite:///{tmp_path / 'acme.db'}")
    trainer = program(tmp_path, body)
    spec = parse_spec(f"""\
name: unit
nodes: 1
command: [{sys.executable}, {trainer}]
checkpoint: {{dir: ckpt, interval: 5}}
fault_tolerance: {{max_restarts: 2, health_check: none, hang_timeout: 2 {ft}}}
""", "t.yaml")
    if rs.get_run(store, "r1") is None:
        rs.create_run(store, run_id="r1", name="unit", cluster="acme", user="u",
                      spec=spec.to_json(), workdir=str(tmp_path), created_ts=0.0, job_id="42")
    spawns = Spawns()
    sup = Supervisor(store=store, slurm=FakeSlurm(), spec=spec,  # type: ignore[arg-type]
                     ctx=JobContext(run_id="r1", job_id="42", attempt=attempt, nodelist="",
                                    cluster="acme", run_dir=str(tmp_path / "run"),
                                    workdir=str(tmp_path)),
                     health=lambda *a, **k: HealthResult(()),
                     checkpoints=lambda d: list(checkpoints or []),
                     spawn=spawns, signals=QuietSignals(), poll_s=0.1, requeue_wait_s=0,
                     log=lambda msg: None)
    return sup, store, spawns


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
        return HealthResult(bad_nodes=("node2",), good_nodes=("node1",))

    sup.health = health
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    assert checked == [["node1", "node2"]]
    attempt = rs.list_attempts(store, "r1")[0]
    assert (attempt.outcome, attempt.excluded) == ("requeue", ["node2"])
    assert spawns.calls[0]["exclude"] == ["node2"]
    assert not (tmp_path / "env.json").exists(), "the trainer must not start on a bad allocation"
