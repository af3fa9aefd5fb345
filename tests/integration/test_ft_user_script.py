"""The user's own training scripts under ``sacme submit``, none of which imports slurm_acme.

* ``examples/train_plain_ddp.py``: DDP with its own ``torch.save`` checkpoints and
  ``--resume``; ``examples/train_dcp.py``: DCP checkpoints; and shell one-liners
  that only print ``step N``.
* Each scenario is the issue's: (a) a rank killed -> resumed from the script's own
  checkpoint, the failed node (not its peer) excluded; (b) the same under
  ``launch: torchrun``; (c) a DCP checkpoint resumed at another world size;
  (d) a hang seen from ``step N`` lines alone; (e) scancel -> CANCELLED;
  (f) a node set DOWN -> excluded, training continues elsewhere; (g) USR2 after
  ``done`` -> COMPLETED; (h) with ``fault_tolerance.spares: 1`` (issue 19), under
  ``launch: srun`` and ``launch: torchrun``, a spare takes the failed node's place
  inside the same job, and the script resumes from its own checkpoint.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_ft_support import REPO, fresh_dir, sacme, status, submit, wait_run

from slurm_acme.slurm import run_slurm

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PLAIN = REPO / "examples" / "train_plain_ddp.py"
DCP = REPO / "examples" / "train_dcp.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"
#: Rank 1 dies of a fault on its node, as an infrastructure failure shows itself.
FAULT = "RuntimeError: NCCL error: unhandled system error, NCCL version 2.21.5"


def user_spec(folder: Path, name: str, command: str, *, nodes: int = 2, ckpt: str = "ckpt",
              ft: dict | None = None, **top: object) -> Path:
    spec = {"name": name, "nodes": nodes, "time": "00:10:00", "command": command,
            "env": {"OMP_NUM_THREADS": "1"}, "checkpoint": {"dir": ckpt},
            "fault_tolerance": {"max_restarts": 2, "health_check": "none", "hang_timeout": 60,
                                **(ft or {})}, **top}
    path = folder / "train.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def plain(steps: int, *, every: int = 5, script: Path = PLAIN, extra: str = "",
          seconds: float = 0.2) -> str:
    return (f"{sys.executable} {script} --steps {steps} --ckpt-every {every} --ckpt-dir ckpt "
            f"--step-seconds {seconds} {extra} --resume \"${{ACME_RESUME_FROM:-}}\"")


def run_dir(folder: Path, run_id: str) -> Path:
    return folder / "acme-runs" / run_id


def progress_steps(folder: Path, run_id: str, job_id: str, attempt: int = 0) -> list[int]:
    path = run_dir(folder, run_id) / f"attempt-{attempt}-{job_id}.progress.jsonl"
    try:
        return [json.loads(line)["step"] for line in path.read_text().splitlines() if line]
    except FileNotFoundError:
        return []


def _assert_rank_failure_recovered(view: dict, folder: Path, run_id: str, steps: int) -> None:
    first, second = view["attempts"]
    culprit, peer = first["nodes"].split(",")[1], first["nodes"].split(",")[0]
    assert first["outcome"] == "requeue", first["reason"]
    assert first["diagnosis"]["node"] == culprit, first["diagnosis"]
    assert first["excluded"] == [culprit] and peer not in view["excluded_nodes"]
    assert culprit not in second["nodes"].split(",")
    # resumed from the script's own torch.save checkpoint, before the failure at step 12
    assert second["resumed_from_step"] == 10
    log = (run_dir(folder, run_id) / f"attempt-1-{second['job_id']}.log").read_text()
    assert "resumed from" in log and "ckpt_step_000010.pt at step 10" in log
    assert second["outcome"] == "completed"
    assert view["state"] == "COMPLETED" and view["last_step"] == steps
    assert view["goodput"] and 0 < view["goodput"] <= 1
    assert view["latest_checkpoint"]["path"].endswith(f"ckpt_step_{steps:06d}.pt")


def test_a_plain_ddp_rank_killed_resumes_from_its_own_checkpoint_excluding_the_failed_node(
        slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    folder, db = fresh_dir("user-plain")
    spec = user_spec(folder, "user-plain", plain(20, extra=f"--simulate-failure '12:{FAULT}'"))
    run_id, job_id = submit(db, spec)
    view = wait_run(db, run_id, job_id, slurm, timeout=420)
    _assert_rank_failure_recovered(view, folder, run_id, 20)
    text = sacme(db, "status", run_id).stdout
    assert "ckpt_step_000020.pt (torch)" in text


def test_b_the_same_under_torchrun_one_agent_per_node(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    folder, db = fresh_dir("user-torchrun")
    spec = user_spec(folder, "user-torchrun", plain(20, extra=f"--simulate-failure '12:{FAULT}'"),
                     launch="torchrun", torchrun=[str(TORCHRUN)])
    run_id, job_id = submit(db, spec)
    view = wait_run(db, run_id, job_id, slurm, timeout=420)
    _assert_rank_failure_recovered(view, folder, run_id, 20)
    log = (run_dir(folder, run_id) / f"attempt-0-{job_id}.log").read_text()
    # torchelastic's summary reached the log; srun -l may break a line where one of its
    # reads of the task's output ended ("1: Root Cause (first ob" / "1: served failure)")
    assert "Root Cause (first observed failure)" in re.sub(r"\n\d+: ", "", log)


def test_c_a_dcp_checkpoint_resumes_at_another_world_size(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    folder, db = fresh_dir("user-dcp")
    spec = user_spec(folder, "user-dcp-2", plain(10, script=DCP, seconds=0.0), nodes=2)
    run_id, job_id = submit(db, spec)
    first = wait_run(db, run_id, job_id, slurm, timeout=300)
    assert first["state"] == "COMPLETED" and first["latest_checkpoint"]["kind"] == "dcp"
    assert (folder / "ckpt" / "step-10" / ".metadata").is_file()
    # the same checkpoint folder, now on 3 ranks
    spec = user_spec(folder, "user-dcp-3", plain(15, script=DCP, seconds=0.0), nodes=3)
    run_id, job_id = submit(db, spec)
    view = wait_run(db, run_id, job_id, slurm, timeout=300)
    attempt = view["attempts"][0]
    assert attempt["resumed_from_step"] == 10
    log = (run_dir(folder, run_id) / f"attempt-0-{job_id}.log").read_text()
    assert "resumed from" in log and "at step 10 (world size 3)" in log
    assert view["state"] == "COMPLETED" and view["last_step"] == 15


HANG_TIMEOUT = 10


def test_d_a_script_that_only_prints_steps_is_seen_to_hang(slurm_cluster, slurm) -> None:  # type: ignore[no-untyped-def]
    folder, db = fresh_dir("user-hang")
    # bash, not Python: nothing but "step N" lines; the first run stops printing at step 6
    command = ('for i in $(seq 1 12); do echo "step $i"; '
               'if [ "$i" = 6 ] && [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 600; fi; '
               'sleep 0.2; done')
    spec = user_spec(folder, "user-hang", command, nodes=1,
                     ft={"hang_timeout": HANG_TIMEOUT, "startup_timeout": 120})
    run_id, job_id = submit(db, spec)
    view = wait_run(db, run_id, job_id, slurm, timeout=300)
    first, second = view["attempts"]
    assert first["outcome"] == "requeue" and first["diagnosis"]["category"] == "hang"
    assert f"hang_timeout {HANG_TIMEOUT}s; last step 6" in first["reason"]
    from slurm_acme.store import open_store
    from slurm_acme.store import runs as rs

    detected = rs.list_attempts(open_store(db), run_id)[0].details["hang_detected_after_s"]
    # within hang_timeout plus one poll (0.5 s), with the same slack as scenario 5
    assert HANG_TIMEOUT <= detected <= HANG_TIMEOUT + 2
    assert second["outcome"] == "completed" and view["last_step"] == 12


def test_e_scancel_leaves_the_run_cancelled(slurm_cluster, slurm, wait_until) -> None:  # type: ignore[no-untyped-def]
    folder, db = fresh_dir("user-scancel")
    spec = user_spec(folder, "user-scancel", plain(400, seconds=0.2))
    run_id, job_id = submit(db, spec)
    try:
        wait_until(lambda: len(progress_steps(folder, run_id, job_id)) >= 3, "training steps",
                   timeout=240, poll=1)
    finally:
        slurm.scancel([job_id])
    view = wait_until(lambda: (v := status(db, run_id))["state"] == "CANCELLED" and v,
                      "the run to be CANCELLED", timeout=120, poll=1)
    assert len(view["attempts"]) == 1
    attempt = view["attempts"][0]
    assert attempt["outcome"] == "cancelled" and attempt["diagnosis"] is None
    wait_until(lambda: slurm.show_job(job_id).state.is_terminal(), "the job to end", timeout=120, poll=1)
    assert slurm.show_job(job_id).restarts == 0


def test_f_a_node_set_down_is_excluded_and_training_continues_elsewhere(slurm_cluster, slurm,
                                                                        wait_until) -> None:  # type: ignore[no-untyped-def]
    folder, db = fresh_dir("user-down")
    spec = user_spec(folder, "user-down", plain(40, seconds=0.3))
    run_id, job_id = submit(db, spec)
    victim = None
    try:
        wait_until(lambda: (folder / "ckpt" / "ckpt_step_000010.pt").exists(), "a checkpoint",
                   timeout=240, poll=1)
        victim = status(db, run_id)["attempts"][0]["nodes"].split(",")[1]
        run_slurm(["scontrol", "update", f"nodename={victim}", "state=down",
                   "reason=acme-test-node-down"], timeout=30)
        view = wait_run(db, run_id, job_id, slurm, timeout=420)
    finally:
        if victim:
            subprocess.run(["scontrol", "update", f"nodename={victim}", "state=resume"],
                           capture_output=True, check=False, timeout=30)
    first, last = view["attempts"][0], view["attempts"][-1]
    assert first["outcome"] == "node_fail", first["reason"]
    assert first["excluded"] == [victim] and first["diagnosis"]["node"] == victim
    assert victim not in last["nodes"].split(",")
    assert last["resumed_from_step"] is not None and last["resumed_from_step"] >= 10
    assert last["outcome"] == "completed" and view["state"] == "COMPLETED"
    assert view["last_step"] == 40


def test_g_a_time_limit_signal_after_done_completes_the_run(slurm_cluster, slurm, wait_until) -> None:  # type: ignore[no-untyped-def]
    folder, db = fresh_dir("user-done")
    # the script says "done" in the documented metrics format (a JSON line, no import),
    # then keeps working on its way out (saving, uploading) when the signal comes
    command = ('for i in 1 2 3; do echo "step $i"; done; '
               'echo "{\\"event\\": \\"done\\", \\"step\\": 3, \\"time\\": $(date +%s), \\"rank\\": 0}" '
               '>> "$ACME_METRICS_FILE"; echo "uploading the final model"; sleep 20')
    spec = user_spec(folder, "user-done", command, nodes=1)
    run_id, job_id = submit(db, spec)
    metrics = run_dir(folder, run_id) / f"attempt-0-{job_id}.metrics.jsonl"
    wait_until(lambda: metrics.exists() and '"done"' in metrics.read_text(), "done", timeout=240, poll=1)
    run_slurm(["scancel", "--batch", "--signal=USR2", job_id], timeout=30)
    view = wait_run(db, run_id, job_id, slurm, timeout=120)
    assert view["state"] == "COMPLETED", view["reason"]
    assert [a["outcome"] for a in view["attempts"]] == ["completed"]
    assert slurm.show_job(job_id).restarts == 0


@pytest.mark.parametrize("launch", ["srun", "torchrun"])
def test_h_a_spare_takes_the_failed_nodes_place_in_the_same_job(slurm_cluster, slurm,
                                                                launch: str) -> None:  # type: ignore[no-untyped-def]
    folder, db = fresh_dir(f"user-spare-{launch}")
    # The script fails only in its job's first run (SLURM_RESTART_COUNT 0); a restart
    # inside the allocation keeps Slurm's count, so the test tells the script the attempt.
    command = 'SLURM_RESTART_COUNT="${ACME_ATTEMPT:-0}" ' + plain(
        20, extra=f"--simulate-failure '12:{FAULT}'")
    top: dict = {"launch": "torchrun", "torchrun": [str(TORCHRUN)]} if launch == "torchrun" else {}
    spec = user_spec(folder, f"user-spare-{launch}", command,
                     ft={"spares": 1, "health_check": "allgather", "health_timeout": 60}, **top)
    run_id, job_id = submit(db, spec)
    view = wait_run(db, run_id, job_id, slurm, timeout=420)

    first, second = view["attempts"]
    peer, culprit = first["nodes"].split(",")
    assert first["outcome"] == "restarted", first["reason"]
    assert first["diagnosis"]["node"] == culprit, first["diagnosis"]
    (spare,) = first["replaced"].values()
    assert first["replaced"] == {culprit: spare} and spare not in (peer, culprit)
    assert second["job_id"] == first["job_id"] == job_id
    assert second["nodes"].split(",") == [peer, spare]
    assert culprit in view["excluded_nodes"] and peer not in view["excluded_nodes"]
    # resumed from the script's own torch.save checkpoint, before the failure at step 12
    assert second["resumed_from_step"] == 10
    log = (run_dir(folder, run_id) / f"attempt-1-{job_id}.log").read_text()
    assert "ckpt_step_000010.pt at step 10" in log
    assert second["outcome"] == "completed" and view["state"] == "COMPLETED"
    assert view["last_step"] == 20 and view["allocated_nodes"] == 3
    assert slurm.show_job(job_id).restarts == 0  # never requeued: the allocation was kept
