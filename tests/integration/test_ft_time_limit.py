"""Time-limit warning: USR2 to the batch step -> the supervisor asks the trainer to
checkpoint, requeues, and the next attempt resumes from that checkpoint.

Slurm sends ``--signal=B:USR2@lead`` to the batch shell (which exec'd the
supervisor); ``scancel --batch --signal=USR2`` delivers exactly that signal now
instead of waiting for a real time limit.
"""

from __future__ import annotations

import time

import pytest
from test_ft_support import fresh_dir, metrics, submit, wait_run, write_spec

from slurm_acme.slurm import run_slurm

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

STEPS = 300


def test_usr2_checkpoints_requeues_and_resumes_without_using_a_restart(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, db_url = fresh_dir("ft-timelimit")
    # slurmstepd delivers USR2 to every process of the step; the trainer's handler
    # (install_checkpoint_signal) only sets a flag, and the checkpoint is a thread.
    # Enough steps that training is still running when the signal lands (a signal after
    # ``done`` is test_ft_user_script's case): wait for real steps, and no ``done``.
    spec = write_spec(tmp_path, "ft-timelimit", steps=STEPS, interval=50, max_restarts=0)
    run_id, job_id = submit(db_url, spec)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            events = metrics(tmp_path, run_id, 0, job_id)
        except FileNotFoundError:
            events = []
        steps = [m["step"] for m in events if m["event"] == "step"]
        if steps and max(steps) >= 8:
            assert not any(m["event"] == "done" for m in events)
            break
        time.sleep(1)
    else:
        raise AssertionError(f"attempt 0 of {run_id} never reached step 8")
    run_slurm(["scancel", "--batch", "--signal=USR2", job_id], timeout=30)
    view = wait_run(db_url, run_id, job_id, slurm, timeout=300)

    first, second = view["attempts"]
    assert first["outcome"] == "time_limit"
    saved = [m["step"] for m in metrics(tmp_path, run_id, 0, job_id) if m["event"] == "requeue"]
    assert saved, "the trainer did not checkpoint on USR2"
    assert saved[0] < STEPS, "the signal must land while training runs"
    assert second["resumed_from_step"] == saved[0]
    assert second["outcome"] == "completed"
    assert view["state"] == "COMPLETED" and view["last_step"] == STEPS
    # max_restarts is 0: a time-limit requeue must not count as a restart
    assert slurm.show_job(job_id).restarts == 1
