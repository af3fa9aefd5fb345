"""Scenario 1: an NCCL error on one node -> infrastructure -> node excluded -> requeued ->
resumes from the async checkpoint -> completes; ``sacme status`` shows all of it."""

from __future__ import annotations

import pytest
from test_ft_support import fresh_dir, metrics, sacme, submit, wait_run, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def test_nccl_error_excludes_node_requeues_and_resumes(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, sqlite_url = fresh_dir("ft-infra")
    spec = write_spec(tmp_path, "ft-nccl", steps=30, interval=5, health_check="allgather",
                      faults="raise:step=12,rank=1,attempt=0,"
                             "message=NCCL error: unhandled system error")
    run_id, job_id = submit(sqlite_url, spec)
    view = wait_run(sqlite_url, run_id, job_id, slurm, timeout=360)

    first, second = view["attempts"]
    culprit = first["nodes"].split(",")[1]  # rank 1 runs on the allocation's second node
    assert first["outcome"] == "requeue"
    assert first["diagnosis"]["origin"] == "infrastructure"
    assert first["diagnosis"]["node"] == culprit
    assert first["excluded"] == [culprit]
    assert culprit not in second["nodes"].split(",")
    assert second["outcome"] == "completed"
    assert second["resumed_from_step"] is not None and 5 <= second["resumed_from_step"] <= 11
    resumes = [m for m in metrics(tmp_path, run_id, 1, job_id) if m["event"] == "resume"]
    assert resumes and resumes[0]["step"] == second["resumed_from_step"]
    assert view["state"] == "COMPLETED" and view["last_step"] == 30
    assert 0 < view["goodput"] <= 1

    job = slurm.show_job(job_id)
    assert job.restarts == 1
    assert culprit in job.excluded
    text = sacme(sqlite_url, "status", job_id).stdout  # found by job id too
    assert run_id in text and "COMPLETED" in text
    assert "NetworkError/infrastructure" in text and culprit in text
    logs = sacme(sqlite_url, "logs", run_id).stdout
    assert "NCCL error: unhandled system error" in logs
