"""Recovery that keeps the allocation (``fault_tolerance.spares``), fakes only at the boundaries.

The training command really runs (locally: a job without a node list); Slurm,
the health check and the requeue helper are fakes (tests/unit/ft_fakes.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from ft_fakes import FakeSlurm, make

from slurm_acme import exitcodes
from slurm_acme.diagnose import Diagnosis
from slurm_acme.ft import policy
from slurm_acme.ft.states import AttemptOutcome
from slurm_acme.health.records import HealthReport
from slurm_acme.store import runs as rs

FAIL_FIRST = ("import os\nmetric('step', 1)\n"
              "if os.environ['ACME_ATTEMPT'] == '0':\n"
              "    raise RuntimeError('NCCL error: unhandled system error')\n"
              "metric('step', 2)\nmetric('done', 2)\n")
ALWAYS_FAIL = "metric('step', 1)\nraise RuntimeError('NCCL error: unhandled system error')\n"


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)


def test_transient_failure_restarts_inside_the_job_without_a_requeue(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, spawns = make(tmp_path, FAIL_FIRST, ft=", spares: 1")
    assert sup.run() == exitcodes.OK
    first, second = rs.list_attempts(store, "r1")
    assert (first.outcome, second.outcome) == ("restarted", "completed")
    assert first.job_id == second.job_id == "42" and (first.attempt, second.attempt) == (0, 1)
    assert first.details["in_place"] is True and first.details["counts_as_restart"] is True
    assert "restarted inside the allocation" in first.details["reason"]
    assert spawns.calls == []  # no requeue helper: the allocation was kept
    assert rs.get_run(store, "r1").state == "COMPLETED"


def test_without_spares_the_same_failure_requeues(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, spawns = make(tmp_path, FAIL_FIRST)
    assert sup.run() == exitcodes.SUPERVISOR_REQUEUE
    assert [a.outcome for a in rs.list_attempts(store, "r1")] == ["requeue"]
    assert spawns.calls[0]["mode"] == "requeue"


def test_in_place_restarts_count_against_max_restarts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, spawns = make(tmp_path, ALWAYS_FAIL, ft=", spares: 0")
    assert sup.run() == exitcodes.SUPERVISOR_STOP
    attempts = rs.list_attempts(store, "r1")
    assert [a.outcome for a in attempts] == ["restarted", "restarted", "stop"]
    assert "max_restarts (2) reached" in attempts[-1].details["reason"]
    assert spawns.calls == []


def test_a_requeue_after_in_place_restarts_numbers_its_attempt_after_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, store, _ = make(tmp_path, FAIL_FIRST, ft=", spares: 1")
    sup.run()
    again, _, _ = make(tmp_path, "metric('step', 3)\nmetric('done', 3)\n", attempt=1,
                       ft=", spares: 1")  # SLURM_RESTART_COUNT=1 after a requeue
    again.run()
    assert [(a.attempt, a.outcome) for a in rs.list_attempts(store, "r1")] == [
        (0, "restarted"), (1, "completed"), (2, "completed")]


def _with_nodes(tmp_path, health=None, **ft):  # type: ignore[no-untyped-def]
    sup, store, spawns = make(tmp_path, "pass\n", ft=", spares: 1, health_check: allgather",
                              extra="", slurm=FakeSlurm())
    sup.spec = sup.spec.model_copy(update={"nodes": 2})
    sup.ctx = replace(sup.ctx, nodelist="node1,node2,node3")
    if health is not None:
        sup.health = health
    return sup, store, spawns


def _infra(node: str | None) -> policy.Decision:
    d = Diagnosis(category="NetworkError", origin="infrastructure",
                  action="requeue_exclude_node", node=node, confidence=0.9, source="rules")
    return policy.from_diagnosis(d, 1)


def test_training_runs_on_nodes_and_the_rest_are_spares(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, _, _ = _with_nodes(tmp_path)
    assert sup._split(["node1", "node2", "node3"], []) == (["node1", "node2"], ["node3"])


def test_a_named_culprit_is_checked_against_known_good_nodes_and_replaced(tmp_path) -> None:  # type: ignore[no-untyped-def]
    calls = []

    def health(nodes, **kw):  # type: ignore[no-untyped-def]
        calls.append((list(nodes), list(kw.get("known_good", ()))))
        return HealthReport((), tuple(nodes), rounds=1, tests=1)

    sup, _, _ = _with_nodes(tmp_path, health)
    decision = sup._suspects_checked(_infra("node2"), ["node1", "node2"], ["node3"])
    assert calls == [(["node2"], ["node1", "node3"])]  # suspects only, no full pre-flight
    assert decision.exclude == ("node2",)  # the logs named it: replaced even if it passed
    assert sup._in_place(decision, policy.AttemptEnd(exit_code=1), ["node3"]) == {"node2": "node3"}


def test_a_failure_with_no_culprit_checks_every_training_node_and_replaces_what_fails(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, _, _ = _with_nodes(tmp_path, lambda nodes, **kw: HealthReport(("node1",), ("node2",),
                                                                       rounds=1, tests=2))
    decision = sup._suspects_checked(_infra(None), ["node1", "node2"], ["node3"])
    assert decision.exclude == ("node1",) and "health check of node1,node2: node1" in decision.reason


def test_no_spare_left_for_a_failed_node_falls_back_to_a_requeue(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, _, _ = _with_nodes(tmp_path)
    assert sup._in_place(_infra("node1"), policy.AttemptEnd(exit_code=1), []) is None


def test_slurm_ending_the_job_is_never_restarted_in_place(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, _, _ = _with_nodes(tmp_path)
    end = policy.AttemptEnd(exit_code=None, terminated=True)
    assert sup._in_place(_infra("node1"), end, ["node3"]) is None


def test_a_requeue_with_too_few_nodes_for_the_spares_asks_for_fewer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sup, _, _ = _with_nodes(tmp_path)  # the fake cluster has node1-4; 2 + 1 spare
    decision = sup._check_room(replace(_infra("node1"), exclude=("node1", "node2")),
                               ["node1", "node2"], [])
    assert decision.outcome is AttemptOutcome.REQUEUE and decision.num_nodes == 2
    stop = sup._check_room(replace(_infra("node1"), exclude=("node1", "node2", "node3")),
                           ["node1", "node2", "node3"], [])
    assert stop.outcome is AttemptOutcome.STOP
