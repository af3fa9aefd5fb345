"""Scenario 2: an injected KeyError is a script error: stopped, not requeued, diagnosis shown."""

from __future__ import annotations

import pytest
from test_ft_support import fresh_dir, sacme, submit, wait_run, write_spec

from slurm_acme import exitcodes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_key_error_stops_without_requeue(slurm_cluster, slurm, pg_url) -> None:  # type: ignore[no-untyped-def]
    # this scenario keeps its store in Postgres: the job writes to it through ACME_DB
    tmp_path, _ = fresh_dir("ft-keyerror")
    db_url = pg_url
    spec = write_spec(tmp_path, "ft-keyerror",
                      faults="raise:step=4,rank=1,message=KeyError: 'input_ids'")
    run_id, job_id = submit(db_url, spec)
    view = wait_run(db_url, run_id, job_id, slurm)

    assert view["state"] == "STOPPED"
    assert len(view["attempts"]) == 1, "a script error must not be requeued"
    attempt = view["attempts"][0]
    assert attempt["outcome"] == "stop"
    assert attempt["exit_code"] != 0
    assert attempt["diagnosis"]["category"] == "KeyError"
    assert attempt["diagnosis"]["origin"] == "script"
    job = slurm.show_job(job_id)
    assert job.restarts == 0
    assert job.exit_code == exitcodes.SUPERVISOR_STOP
    text = sacme(db_url, "status", run_id).stdout
    assert "KeyError/script" in text and "STOPPED" in text
