"""store/runs.py on SQLite and Postgres: one run identity across attempts and job ids."""

from __future__ import annotations

from slurm_acme.store import runs as rs


def _run(store, run_id="r1"):  # type: ignore[no-untyped-def]
    rs.create_run(store, run_id=run_id, name="tiny", cluster="acme", user="u", spec="{}",
                  workdir="/w", created_ts=1.0, job_id="10")


def test_run_found_by_id_job_and_name(store) -> None:  # type: ignore[no-untyped-def]
    _run(store)
    rs.start_attempt(store, run_id="r1", attempt=0, job_id="10", nodelist="node1,node2", start_ts=2.0)
    rs.start_attempt(store, run_id="r1", attempt=1, job_id="10", nodelist="node3,node2", start_ts=5.0)
    rs.start_attempt(store, run_id="r1", attempt=0, job_id="11", nodelist="node3,node4", start_ts=9.0)
    assert rs.find_run(store, "r1").run_id == "r1"
    assert rs.find_run(store, "11").run_id == "r1"
    assert rs.find_run(store, "tiny").run_id == "r1"
    assert rs.find_run(store, "nope") is None
    assert [(a.attempt, a.job_id) for a in rs.list_attempts(store, "r1")] == [(0, "10"), (1, "10"), (0, "11")]


def test_end_attempt_records_decision_and_failure(store) -> None:  # type: ignore[no-untyped-def]
    _run(store)
    rs.start_attempt(store, run_id="r1", attempt=0, job_id="10", nodelist="n1", start_ts=2.0,
                     resumed_from_step=5, resumed_from="/c/step_5", skip_steps="7-8")
    fid = rs.record_failure(store, cluster="acme", job_id="10", run_id="r1", attempt=0, ts=3.0,
                            category="nccl", origin="infrastructure", action="requeue_exclude_node",
                            node="n2", rule_id="nccl-x", confidence=1.0, evidence=["l1", "l2"],
                            source="rule", gpus=0, time_to_failure_s=1.0, log_path="/x")
    rs.end_attempt(store, run_id="r1", attempt=0, job_id="10", end_ts=4.0, outcome="requeue",
                   exit_code=1, excluded=["n2", "n2"], last_step=9, time_lost_s=1.5,
                   failure_id=fid, detail={"reason": "why"})
    a = rs.list_attempts(store, "r1")[0]
    assert (a.outcome, a.excluded, a.details["reason"], a.resumed_from_step) == ("requeue", ["n2"], "why", 5)
    f = rs.get_failures(store, [fid])[fid]
    assert (f.category, f.node, f.evidence) == ("nccl", "n2", ("l1", "l2"))
    rs.set_failure_recovery(store, fid, 12.0)


def test_delete_run_undoes_create(store) -> None:  # type: ignore[no-untyped-def]
    _run(store)
    rs.delete_run(store, "r1")
    assert rs.get_run(store, "r1") is None


def test_checkpoints_upsert_by_step(store) -> None:  # type: ignore[no-untyped-def]
    _run(store)
    for job in ("10", "11"):
        rs.record_checkpoint(store, run_id="r1", job_id=job, step=5, path="/c/5", size=10.0,
                             checksum="x", healthy=True, created_ts=1.0)
    rs.record_checkpoint(store, run_id="r1", job_id="11", step=10, path="/c/10", size=10.0,
                         checksum="y", healthy=True, created_ts=2.0)
    assert [c.step for c in rs.list_checkpoints(store, "r1")] == [5, 10]
