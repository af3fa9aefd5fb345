"""The supervisor with trainers that know nothing of slurm-acme (no metrics file).

Each trainer is a real process that only prints, like an unmodified script;
Slurm, the health check and the requeue helper are fakes (``ft_fakes``).
"""

from __future__ import annotations

import json
import threading
import zipfile

import pytest
from ft_fakes import FakeSlurm, make

from slurm_acme import contracts as c
from slurm_acme import exitcodes
from slurm_acme.ft.states import AttemptOutcome, RunState
from slurm_acme.ft.status import run_view
from slurm_acme.store import runs as rs

PRINTS_STEPS = """\
for s in range(1, 6):
    print(f"step {s} loss {1.0 / s:.3f}", flush=True)
    time.sleep(0.05)
"""


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)


def test_steps_printed_by_the_trainer_are_its_progress_and_status_shows_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, _ = make(tmp_path, PRINTS_STEPS)
    assert sup.run() == exitcodes.OK
    attempt = rs.list_attempts(store, "r1")[0]
    assert (attempt.outcome, attempt.last_step) == ("completed", 5)
    steps = [json.loads(line) for line in sup.ctx.path(c.AttemptFile.PROGRESS).read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5]
    view = run_view(store, rs.get_run(store, "r1"))
    assert view.last_step == 5 and view.useful_s > 0 and view.goodput and view.goodput > 0


def test_a_quiet_trainer_after_its_last_step_is_a_hang_quoting_hang_timeout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, _ = make(tmp_path, PRINTS_STEPS + "time.sleep(60)\n")
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    attempt = rs.list_attempts(store, "r1")[0]
    assert attempt.outcome == "requeue" and attempt.details["hang_limit"] == "hang_timeout"
    assert "hang_timeout 2s; last step 5" in attempt.details["reason"]
    failure = rs.get_failures(store, [attempt.failure_id])[attempt.failure_id]
    assert failure.category == "hang"  # not the supervisor's own kill read as a failure


def test_silence_before_the_first_step_quotes_startup_timeout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, _ = make(tmp_path, "time.sleep(60)\n", ft=", startup_timeout: 1")
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    reason = rs.list_attempts(store, "r1")[0].details["reason"]
    assert "startup_timeout 1s" in reason and "hang_timeout" not in reason


def test_output_without_steps_is_a_heartbeat(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # prints its own format for longer than both limits, but never falls silent
    body = ("for i in range(40):\n"
            "    print(f'epoch-ish progress {i}', flush=True)\n"
            "    time.sleep(0.1)\n")
    sup, store, _ = make(tmp_path, body, ft=", hang_timeout: 3, startup_timeout: 3")
    assert sup.run() == exitcodes.OK
    assert rs.list_attempts(store, "r1")[0].outcome == "completed"


def test_a_custom_step_pattern_is_used(tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = "for i in (10, 20, 30):\n    print(f'it={i} ok', flush=True)\n"
    sup, store, _ = make(tmp_path, body, extra=r"progress: {patterns: ['it=(\d+)']}")
    assert sup.run() == exitcodes.OK
    assert rs.list_attempts(store, "r1")[0].last_step == 30


def _torch_save_like(path) -> None:  # type: ignore[no-untyped-def]
    with zipfile.ZipFile(path, "w") as zf:  # torch.save's format: a zip archive
        zf.writestr("archive/data.pkl", b"x")


def test_the_newest_of_the_trainers_own_checkpoints_is_exported_and_shown(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    _torch_save_like(ckpt / "model_step_5.pt")
    (ckpt / "step-8").mkdir()
    (ckpt / "step-8" / "__0_0.distcp").write_bytes(b"shard")
    (ckpt / "step-8" / ".metadata").write_bytes(b"meta")
    (ckpt / "model_step_9.pt").write_bytes(b"PK\x03\x04 torn")  # a torn torch.save
    sup, store, _ = make(tmp_path, "print('step 9', flush=True)\n")
    assert sup.run() == exitcodes.OK
    env = json.loads((tmp_path / "env.json").read_text())
    assert env[c.ENV_RESUME_FROM] == str(ckpt / "step-8")
    assert env[c.ENV_RESUME_STEP] == "8"
    attempt = rs.list_attempts(store, "r1")[0]
    assert (attempt.resumed_from_step, attempt.resumed_from) == (8, str(ckpt / "step-8"))
    view = run_view(store, rs.get_run(store, "r1"))
    assert view.checkpoints == [5, 8]
    assert view.latest_checkpoint["kind"] == "dcp"
    assert (ckpt / "model_step_5.pt").exists() and (ckpt / "model_step_9.pt").exists()


def test_status_lists_what_is_on_disk_not_what_was_recorded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for step in (1, 2, 3):
        _torch_save_like(ckpt / f"ckpt_{step}.pt")
    sup, store, _ = make(tmp_path, "print('step 3', flush=True)\n", extra="checkpoint: {dir: ckpt, glob: ['ckpt_*.pt']}")
    assert sup.run() == exitcodes.OK
    assert [r.step for r in rs.list_checkpoints(store, "r1")] == [1, 2, 3]
    (ckpt / "ckpt_1.pt").unlink()  # the trainer's own retention
    _torch_save_like(ckpt / "ckpt_4.pt")
    assert run_view(store, rs.get_run(store, "r1")).checkpoints == [2, 3, 4]


TRAPS = """\
import signal
def on(sig, _):
    print(f"got {signal.Signals(sig).name}", flush=True)
    with open("signals.txt", "a") as f:
        f.write(signal.Signals(sig).name + "\\n")
    sys.exit(0)
signal.signal(signal.SIGUSR2, on)
signal.signal(signal.SIGTERM, on)
"""


def test_time_limit_stops_an_unmodified_trainer_with_sigterm_and_requeues(tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = TRAPS + "for s in range(1, 400):\n    print(f'step {s}', flush=True)\n    time.sleep(0.05)\n"
    sup, store, spawns = make(tmp_path, body, ft=", max_restarts: 0, signal_lead: 10")
    threading.Timer(1.5, lambda: setattr(sup.signals, "usr2", True)).start()
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    attempt = rs.list_attempts(store, "r1")[0]
    assert attempt.outcome == "time_limit" and not attempt.details["counts_as_restart"]
    # it never wrote metrics, so it is not asked to checkpoint with a USR2 it cannot handle
    assert (tmp_path / "signals.txt").read_text() == "SIGTERM\n"
    assert spawns.calls[0]["mode"] == "requeue"


def test_a_time_limit_signal_after_done_never_fails_the_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = (TRAPS + "metric('step', 1)\nmetric('done', 1)\n"
            "print('saving the final model', flush=True)\ntime.sleep(2)\n")
    sup, store, spawns = make(tmp_path, body, ft=", max_restarts: 0")
    threading.Timer(0.8, lambda: setattr(sup.signals, "usr2", True)).start()
    assert sup.run() == exitcodes.OK
    assert rs.get_run(store, "r1").state == RunState.COMPLETED.value
    assert not (tmp_path / "signals.txt").exists(), "a finished trainer must not be signalled"
    assert spawns.calls == []


def test_scancel_leaves_the_run_cancelled(tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = "for s in range(1, 400):\n    print(f'step {s}', flush=True)\n    time.sleep(0.05)\n"
    sup, store, spawns = make(tmp_path, body, slurm=FakeSlurm(job_state="CANCELLED"))
    threading.Timer(1.0, lambda: setattr(sup.signals, "term", True)).start()
    assert sup.run() == exitcodes.SUPERVISOR_STOP
    attempt = rs.list_attempts(store, "r1")[0]
    assert attempt.outcome == AttemptOutcome.CANCELLED.value and attempt.failure_id is None
    assert rs.get_run(store, "r1").state == RunState.CANCELLED.value
    assert spawns.calls == []


def test_a_node_down_when_slurm_ends_the_job_is_a_node_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, _, _ = make(tmp_path, "", slurm=FakeSlurm(job_state="PENDING", down=("node2",)))
    decision = sup._ended_by_slurm(["node1", "node2"])
    assert decision.outcome is AttemptOutcome.NODE_FAIL and decision.exclude == ("node2",)


def test_the_next_attempt_closes_a_lost_one_with_the_node_that_is_down(tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, store, _ = make(tmp_path, "print('step 1', flush=True)\n",
                         slurm=FakeSlurm(down=("node2",)))
    rs.start_attempt(store, run_id="r1", attempt=0, job_id="41", nodelist="node1,node2", start_ts=1.0)
    sup2, _, _ = make(tmp_path, "print('step 1', flush=True)\n", attempt=1,
                      slurm=FakeSlurm(down=("node2",)))
    assert sup2.run() == exitcodes.OK
    first = rs.list_attempts(store, "r1")[0]
    assert first.outcome == AttemptOutcome.NODE_FAIL.value and first.excluded == ["node2"]


@pytest.mark.parametrize("run_state,job_state,expected", [
    ("RUNNING", "CANCELLED", "CANCELLED"),
    ("REQUEUED", "CANCELLED", "CANCELLED"),
    ("PENDING", "FAILED", "STOPPED"),      # the supervisor could not even start
    ("RUNNING", "COMPLETED", "STOPPED"),   # ... or died without a decision
    ("REQUEUED", "COMPLETED", "REQUEUED"),  # a requeue passes through ended-looking states
    ("RUNNING", "NODE_FAIL", "RUNNING"),   # Slurm may still requeue it
    ("COMPLETED", "CANCELLED", "COMPLETED"),
])
def test_status_reconciles_a_run_whose_job_ended_without_a_decision(
        tmp_path, run_state, job_state, expected) -> None:  # type: ignore[no-untyped-def]
    _, store, _ = make(tmp_path, "")
    rs.update_run(store, "r1", state=run_state)
    view = run_view(store, rs.get_run(store, "r1"), FakeSlurm(job_state=job_state))  # type: ignore[arg-type]
    assert view.state == expected
    if expected == "STOPPED":
        assert "without a decision by the supervisor" in view.reason and "slurm-42.out" in view.reason


def test_a_cancelled_job_shows_its_open_attempt_cancelled_and_leaves_the_store_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, store, _ = make(tmp_path, "")
    rs.update_run(store, "r1", state="RUNNING")
    rs.start_attempt(store, run_id="r1", attempt=0, job_id="42", nodelist="node1,node2", start_ts=1.0)
    view = run_view(store, rs.get_run(store, "r1"), FakeSlurm(job_state="CANCELLED"))  # type: ignore[arg-type]
    assert view.state == "CANCELLED" and view.attempts[0].outcome == "cancelled"
    assert rs.list_attempts(store, "r1")[0].outcome is None  # a view, not a write
    assert run_view(store, rs.get_run(store, "r1"), FakeSlurm(job_state="RUNNING")).attempts[0].outcome is None  # type: ignore[arg-type]


def test_an_allocation_holding_an_excluded_node_is_requeued_without_it_uncounted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, store, _ = make(tmp_path, "")
    rs.start_attempt(store, run_id="r1", attempt=0, job_id="42", nodelist="node1,node2", start_ts=1.0)
    rs.end_attempt(store, run_id="r1", attempt=0, job_id="42", end_ts=2.0, outcome="node_fail",
                   excluded=["node2"], detail={"reason": "node2 down"})
    sup, _, spawns = make(tmp_path, "print('step 1', flush=True)\n", attempt=1)
    sup.ctx = type(sup.ctx)(**{**sup.ctx.__dict__, "nodelist": "node2,node3"})
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    second = rs.list_attempts(store, "r1")[1]
    assert second.outcome == "requeue" and second.excluded == ["node2"]
    assert second.details["counts_as_restart"] is False
    assert spawns.calls[0]["exclude"] == ["node2"]
    assert not (tmp_path / "env.json").exists(), "the trainer must not start there"


def test_a_node_down_only_at_the_moment_of_the_sigterm_is_still_excluded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # ReturnToService=2: a node set DOWN is back within half a second; the handler saw it
    slurm = FakeSlurm(job_state="RUNNING")
    sup, _, _ = make(tmp_path, "", slurm=slurm)
    sup._down_at_term = ("node2",)  # what the SIGTERM handler recorded
    decision = sup._ended_by_slurm(["node1", "node2"])
    assert decision.outcome is AttemptOutcome.NODE_FAIL and decision.exclude == ("node2",)


def test_a_node_back_in_service_before_anyone_asked_is_named_from_its_down_event(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """NODE_FAIL, yet every node is up again (ReturnToService=2: node2 was back 44 ms after
    `scontrol update state=down`, CI): slurmdbd's event log still names it."""
    import time as clock

    now = clock.strftime("%Y-%m-%dT%H:%M:%S", clock.localtime())
    events = (f"node2|{now}|DOWN|acme-test-node-down\n"
              f"node1|{now}|DRAIN|acme: NVLinkError job 52 (2 in 24h)\n"
              "node3|2026-01-01T00:00:00|DOWN|long before this step\n")
    sup, _, _ = make(tmp_path, "", slurm=FakeSlurm(job_state="NODE_FAIL", events=events))
    sup._step_started = clock.time()
    decision = sup._ended_by_slurm(["node1", "node2", "node3"])
    assert decision.outcome is AttemptOutcome.NODE_FAIL and decision.exclude == ("node2",)


def test_down_events_are_not_read_unless_slurm_says_node_fail(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import time as clock

    now = clock.strftime("%Y-%m-%dT%H:%M:%S", clock.localtime())
    sup, _, _ = make(tmp_path, "", slurm=FakeSlurm(job_state="TIMEOUT", events=f"node2|{now}|DOWN|x\n"))
    sup._step_started = clock.time()
    assert sup._ended_by_slurm(["node1", "node2"]).outcome is AttemptOutcome.TIME_LIMIT


def test_srun_reporting_a_node_failure_names_the_node_slurm_killed_the_job_for(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from slurm_acme.diagnose import Diagnosis

    sup, _, _ = make(tmp_path, "", slurm=FakeSlurm(job_state="RUNNING"))
    srun_says = Diagnosis("NodeFailure", "infrastructure", "requeue_exclude_node", node="node2",
                          evidence=("srun: error: Node failure on node2",), source="rule")
    decision = sup._ended_by_slurm(["node1", "node2"], srun_says)
    assert decision.outcome is AttemptOutcome.NODE_FAIL and decision.exclude == ("node2",)
    assert decision.diagnosis is srun_says


def test_the_sigterm_handler_reads_node_states_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import signal

    from slurm_acme.ft.watch import Signals

    seen = []
    signals = Signals(on_term=lambda: seen.append("snapshot"))
    old = signal.getsignal(signal.SIGTERM)
    try:
        signals.install()
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    assert signals.term and seen == ["snapshot"]


def test_an_unknown_failure_excludes_only_what_the_health_check_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from slurm_acme.ft import policy
    from slurm_acme.health.records import HealthReport

    sup, _, _ = make(tmp_path, "", ft=", health_check: allgather")
    checked = []

    def health(nodes, **kw):  # type: ignore[no-untyped-def]
        checked.append(list(nodes))
        return HealthReport(bad_nodes=("node2",), good_nodes=("node1", "node3"), rounds=2, tests=3)

    sup.health = health
    decision = sup._decide(policy.AttemptEnd(exit_code=1), ["node1", "node2", "node3"], policy.Budget())
    assert checked == [["node1", "node2", "node3"]]
    assert decision.exclude == ("node2",) and decision.unknown and decision.requeues
    assert "health check found node2" in decision.reason
