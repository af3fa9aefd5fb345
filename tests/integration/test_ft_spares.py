"""Recovery that keeps the allocation (issue 19): ``fault_tolerance.spares`` on the real cluster.

A spare takes a failed node's place inside the same job id; with no spare left the
job falls back to a requeue that excludes the failed nodes; a hang restarts in place;
in-place restarts count against ``max_restarts``.
"""

from __future__ import annotations

import pytest
from test_ft_support import fresh_dir, sacme, submit, wait_run, write_spec

from slurm_acme import exitcodes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

NCCL = "message=NCCL error: unhandled system error"


def test_a_spare_takes_the_culprits_place_in_the_same_job(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, sqlite_url = fresh_dir("ft-spare")
    spec = write_spec(tmp_path, "ft-spare", steps=30, interval=5, health_check="allgather",
                      spares=1, faults=f"raise:step=12,rank=1,attempt=0,{NCCL}")
    run_id, job_id = submit(sqlite_url, spec)
    view = wait_run(sqlite_url, run_id, job_id, slurm, timeout=360)

    first, second = view["attempts"]
    culprit = first["nodes"].split(",")[1]  # rank 1 runs on the second training node
    assert first["outcome"] == "restarted" and first["diagnosis"]["node"] == culprit
    assert first["job_id"] == second["job_id"] == job_id
    (spare,) = first["replaced"].values()
    assert first["replaced"] == {culprit: spare} and spare not in first["nodes"].split(",")
    assert second["nodes"].split(",") == [first["nodes"].split(",")[0], spare]
    assert culprit in first["excluded"]
    assert second["outcome"] == "completed"
    assert second["resumed_from_step"] is not None and 5 <= second["resumed_from_step"] <= 11
    assert view["state"] == "COMPLETED" and view["last_step"] == 30
    assert view["allocated_nodes"] == 3 and view["training_nodes"] == 2
    assert 0 < view["goodput"] <= 2 / 3  # the idle spare is allocated GPU time
    assert slurm.show_job(job_id).restarts == 0  # never requeued: the allocation was kept
    text = sacme(sqlite_url, "status", job_id).stdout
    assert f"restarted in place ({culprit}->{spare})" in text


def test_a_second_failure_with_no_spare_left_requeues_excluding_both(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, sqlite_url = fresh_dir("ft-spare2")
    spec = write_spec(tmp_path, "ft-spare2", steps=24, interval=5, spares=1,
                      faults=f"raise:step=12,rank=1,attempt=0,{NCCL};"
                             f"raise:step=14,rank=0,attempt=1,{NCCL}")
    run_id, job_id = submit(sqlite_url, spec)
    view = wait_run(sqlite_url, run_id, job_id, slurm, timeout=360)

    first, second, third = view["attempts"]
    a, b = first["nodes"].split(",")
    assert first["outcome"] == "restarted" and first["replaced"] == {b: second["nodes"].split(",")[1]}
    assert second["outcome"] == "requeue" and second["diagnosis"]["node"] == a
    assert second["excluded"] == [a] and set(view["excluded_nodes"]) == {a, b}
    assert third["outcome"] == "completed" and not {a, b} & set(third["nodes"].split(","))
    assert second["resumed_from_step"] is not None and third["resumed_from_step"] is not None
    assert view["state"] == "COMPLETED" and view["last_step"] == 24
    job = slurm.show_job(job_id)
    assert job.restarts == 1 and {a, b} <= set(slurm.show_hostnames(job.excluded))


def test_a_hang_restarts_in_place(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, sqlite_url = fresh_dir("ft-spare-hang")
    spec = write_spec(tmp_path, "ft-spare-hang", steps=24, interval=5, hang_timeout=15,
                      spares=1, faults="hang:step=11,rank=1,attempt=0")
    run_id, job_id = submit(sqlite_url, spec)
    view = wait_run(sqlite_url, run_id, job_id, slurm, timeout=300)

    first, second = view["attempts"]
    assert first["outcome"] == "restarted" and first["diagnosis"]["category"] == "hang"
    assert first["replaced"] == {} and second["nodes"] == first["nodes"]
    assert second["outcome"] == "completed" and second["resumed_from_step"] == 10
    assert slurm.show_job(job_id).restarts == 0


def test_in_place_restarts_count_against_max_restarts(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, sqlite_url = fresh_dir("ft-spare-max")
    spec = write_spec(tmp_path, "ft-spare-max", max_restarts=2, spares=0, hang_timeout=10,
                      faults="hang:step=3")
    run_id, job_id = submit(sqlite_url, spec)
    view = wait_run(sqlite_url, run_id, job_id, slurm, timeout=360)

    assert [a["outcome"] for a in view["attempts"]] == ["restarted", "restarted", "stop"]
    assert {a["job_id"] for a in view["attempts"]} == {job_id}
    assert view["state"] == "STOPPED" and "max_restarts (2) reached" in view["reason"]
    job = slurm.show_job(job_id)
    assert job.restarts == 0 and job.exit_code == exitcodes.SUPERVISOR_STOP
