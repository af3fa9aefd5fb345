"""Scenario 3: a loss spike -> rolled back to the checkpoint before it, its step skipped."""

from __future__ import annotations

import pytest
from test_ft_support import fresh_dir, metrics, submit, wait_run, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def test_loss_spike_rolls_back_skips_and_completes(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, sqlite_url = fresh_dir("ft-spike")
    spec = write_spec(tmp_path, "ft-spike", steps=24, interval=5, faults="spike:step=12,factor=50")
    run_id, job_id = submit(sqlite_url, spec)
    view = wait_run(sqlite_url, run_id, job_id, slurm, timeout=300)

    first, second = view["attempts"]
    assert first["outcome"] == "rollback"
    assert "loss spike at step 12" in first["reason"]
    assert first["diagnosis"]["category"] == "LossSpike"
    assert second["skip_steps"] == "12-12"
    assert second["resumed_from_step"] is not None and second["resumed_from_step"] < 12
    assert second["outcome"] == "completed"
    events = metrics(tmp_path, run_id, 1, job_id)
    assert any(m["event"] == "skip" and m["step"] == 12 for m in events)
    assert not any(m["event"] in ("spike", "nan") for m in events)
    assert view["state"] == "COMPLETED" and view["last_step"] == 24
