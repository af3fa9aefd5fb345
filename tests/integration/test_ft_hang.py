"""Scenario 5: a hang is detected within hang_timeout and recovered from the checkpoint."""

from __future__ import annotations

import pytest
from test_ft_support import fresh_dir, submit, wait_run, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

HANG_TIMEOUT = 15


def test_hang_detected_within_timeout_and_recovered(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, sqlite_url = fresh_dir("ft-hang")
    spec = write_spec(tmp_path, "ft-hang", steps=24, interval=5, hang_timeout=HANG_TIMEOUT,
                      faults="hang:step=11,rank=1,attempt=0")
    run_id, job_id = submit(sqlite_url, spec)
    view = wait_run(sqlite_url, run_id, job_id, slurm, timeout=300)

    first, second = view["attempts"]
    assert first["outcome"] == "requeue"
    assert first["diagnosis"]["category"] == "hang"
    detail = first["reason"]
    assert "hang" in detail
    # the supervisor noticed no progress after hang_timeout (plus one poll), not later
    from slurm_acme.store import open_store
    from slurm_acme.store import runs as rs

    attempt0 = rs.list_attempts(open_store(sqlite_url), run_id)[0]
    assert HANG_TIMEOUT <= attempt0.details["hang_detected_after_s"] <= HANG_TIMEOUT + 2
    assert second["outcome"] == "completed"
    assert second["resumed_from_step"] == 10
    assert view["state"] == "COMPLETED" and view["last_step"] == 24
