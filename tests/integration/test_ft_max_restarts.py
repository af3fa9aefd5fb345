"""Scenario 6: infrastructure failures that keep coming stop the run at max_restarts."""

from __future__ import annotations

import pytest
from test_ft_support import fresh_dir, submit, wait_run, write_spec

from slurm_acme import exitcodes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def test_repeated_infrastructure_failures_stop_at_max_restarts(
        slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, sqlite_url = fresh_dir("ft-maxrestarts")
    spec = write_spec(tmp_path, "ft-maxrestarts", max_restarts=2,
                      faults="raise:step=3,message=NCCL error: unhandled system error")
    run_id, job_id = submit(sqlite_url, spec)
    view = wait_run(sqlite_url, run_id, job_id, slurm, timeout=360)

    outcomes = [a["outcome"] for a in view["attempts"]]
    assert outcomes == ["requeue", "requeue", "stop"]
    assert all(a["diagnosis"]["origin"] == "infrastructure" for a in view["attempts"])
    assert view["state"] == "STOPPED"
    assert "max_restarts (2) reached" in view["reason"]
    job = slurm.show_job(job_id)
    assert job.restarts == 2
    assert job.exit_code == exitcodes.SUPERVISOR_STOP
