"""Requeue the supervisor's own job with new excluded nodes, without the 2-minute wait.

What Slurm 22.05 allows, verified on the local cluster (proctrack/linuxproc,
PrologFlags=Alloc, JobRequeue=1):

* a RUNNING job's ``ExcNodeList`` cannot be updated; a PENDING one's can;
* ``scontrol requeuehold`` kills the batch step and every process Slurm
  tracks under it. A child started with a plain ``setsid`` is still tracked
  (linuxproc follows parent links) and dies with the job; a process that was
  double-forked (re-parented to init) survives the job's end;
* the job is PENDING (held) well under a second after ``requeuehold``;
  ``scontrol update ExcNodeList=... StartTime=now`` then ``release`` makes it
  start again at once instead of after the ~2-minute BeginTime delay.

So the supervisor records its decision in the store, then starts this module
as a detached helper (double fork) and waits to be killed. The helper holds
the job, waits for PENDING, sets the exclusions and StartTime, and releases.
The same helper in ``--watch`` mode is started when the supervisor is
killed by Slurm (a NODE_FAIL requeue): it waits for PENDING, sets the
exclusions (the failed node may return to service before the job starts
again: ``ReturnToService=2``) and StartTime=now, and gives up quietly if the
job ends instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from slurm_acme.slurm import JobNotFound, JobState, Slurm, SlurmError

#: (nodes, tasks, CPUs) a requeued job asks for instead of its submitted size.
Resize = tuple[int, int, int]

#: How long the helper waits for the job to become PENDING.
PENDING_WAIT_S = 90.0


def spawn_detached(job_id: str, *, exclude: Sequence[str], mode: str, log_path: str,
                   python: str | None = None, resize: Resize | None = None) -> None:
    """Start the helper so that it is not a descendant of the job's processes."""
    argv = [python or sys.executable, "-m", "slurm_acme.ft.requeue", "--job", job_id,
            "--mode", mode, "--exclude", ",".join(exclude)]
    if resize:
        argv += ["--resize", ",".join(str(v) for v in resize)]
    pid = os.fork()
    if pid == 0:  # child: new session, fork again, exit so the grandchild is re-parented
        try:
            os.setsid()
            if os.fork() == 0:
                fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.execv(argv[0], argv)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} requeue-helper: {msg}", flush=True)


#: Ended states a requeue may still follow (the requeue, ours or Slurm's, is under way).
_MAY_STILL_REQUEUE = frozenset({JobState.COMPLETED, JobState.NODE_FAIL, JobState.PREEMPTED,
                                JobState.TIMEOUT})


def wait_pending(slurm: Slurm, job_id: str, timeout: float) -> JobState | None:
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        try:
            state = slurm.show_job(job_id).state
        except JobNotFound:
            return None
        except SlurmError as exc:
            _log(f"show job failed, retrying: {exc}")
            state = None
        if state is JobState.PENDING:
            return state
        if state is not None and state.is_terminal() and state not in _MAY_STILL_REQUEUE:
            _log(f"job {job_id} ended as {state.value}; nothing to release")
            return state
        time.sleep(0.3)
    return state


def requeue_excluding(slurm: Slurm, job_id: str, exclude: Sequence[str],
                      resize: Resize | None = None) -> None:
    """Hold-requeue, wait for PENDING, set exclusions and StartTime=now, release.

    ``resize``: what the job asks for from now on, when the exclusions left fewer nodes
    than its training nodes plus spares. A PENDING job's size can change, but NumNodes
    alone only lowers the minimum (and its tasks and CPUs stay those of the old size:
    "Requested node configuration is not available"), so all three are set."""
    _log(f"requeuehold {job_id}, exclude={','.join(exclude) or '-'}")
    slurm.requeue(job_id, hold=True)
    state = wait_pending(slurm, job_id, PENDING_WAIT_S)
    if state is not JobState.PENDING:
        _log(f"job {job_id} did not become PENDING (state {state}); releasing anyway")
    fields: dict[str, str] = {"StartTime": "now"}
    if exclude:
        fields["ExcNodeList"] = ",".join(sorted(set(exclude)))
    if resize:
        nodes, tasks, cpus = resize
        fields.update(NumNodes=f"{nodes}-{nodes}", NumTasks=str(tasks), NumCPUs=str(cpus))
    slurm.update_job(job_id, **fields)
    slurm.release(job_id)
    _log(f"released {job_id}")


def hurry_requeued(slurm: Slurm, job_id: str, exclude: Sequence[str] = ()) -> None:
    """After Slurm itself requeued the job (NODE_FAIL), keep the failed nodes out and
    skip the BeginTime delay."""
    state = wait_pending(slurm, job_id, PENDING_WAIT_S)
    if state is JobState.PENDING:
        fields: dict[str, str] = {"StartTime": "now"}
        if exclude:
            fields["ExcNodeList"] = ",".join(sorted(set(exclude)))
        slurm.update_job(job_id, **fields)
        _log(f"job {job_id} requeued by Slurm; StartTime=now, exclude={','.join(exclude) or '-'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slurm_acme.ft.requeue")
    parser.add_argument("--job", required=True)
    parser.add_argument("--mode", choices=("requeue", "watch"), default="requeue")
    parser.add_argument("--exclude", default="")
    parser.add_argument("--resize", default="", help="NODES,TASKS,CPUS")
    args = parser.parse_args(argv)
    slurm = Slurm(timeout=30)
    exclude = [n for n in args.exclude.split(",") if n]
    try:
        if args.mode == "requeue":
            resize = tuple(int(v) for v in args.resize.split(",")) if args.resize else None
            requeue_excluding(slurm, args.job, exclude,
                              resize if resize and len(resize) == 3 else None)  # type: ignore[arg-type]
        else:
            hurry_requeued(slurm, args.job, exclude)
    except SlurmError as exc:
        _log(f"failed: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
