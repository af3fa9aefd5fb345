#!/usr/bin/env python3
"""Recovery from an infrastructure failure: ``sacme submit`` vs a plain ``sbatch --requeue``.

Both runs train the same tiny GPT on 2 nodes of the local cluster; in both, the
rank on the second node dies at step ``--fault-step`` of the first attempt with
``NCCL error: unhandled system error`` (a transient fault: it does not recur
on the restart, so the baseline is not penalised by landing on a bad node again).

* ``acme``: ``sacme submit``; the in-job supervisor diagnoses the failure,
  excludes the node, requeues the job at once (StartTime=now) and the next
  attempt resumes from the newest healthy asynchronous checkpoint.
* ``baseline``: the same trainer under ``srun`` in a plain ``sbatch --requeue``
  script. The job fails; an operator who polls ``squeue`` every
  ``--operator-poll`` seconds (an attentive on-call, a lower bound for a
  person) runs ``scontrol requeue``; Slurm's requeue delay applies, and the
  script knows no checkpoint (each attempt gets a fresh checkpoint folder), so
  training restarts from step 1.

Per run: ``time_to_detect_s`` (last progress before the crash -> the failure is
known: the supervisor's decision, or the operator seeing FAILED),
``time_to_resume_s`` (last progress before the crash -> first training step of
the next attempt) and ``goodput`` (time spent on steps that count toward the
final model, over wall time from the first attempt's start to the end).

Prints one JSON object. Usage: ``python bench/recovery.py [--steps 40] [--fault-step 22]``.
Needs the local cluster (``sbin/acme-cluster up``) and ``SLURM_CONF``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurm_acme.ft.metrics import read_records, useful_seconds
from slurm_acme.slurm import JobState, Slurm

TRAINER = REPO / "examples" / "train_tiny_gpt.py"
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--batch-size", "4", "--seq-len", "32"]


def trainer_args(steps: int, interval: int) -> list[str]:
    return [sys.executable, str(TRAINER), "--steps", str(steps), "--ckpt-interval", str(interval), *TINY]


def fault(step: int) -> str:
    return f"raise:step={step},rank=1,attempt=0,message=NCCL error: unhandled system error"


def sacme(db: str, *args: str, cwd: Path) -> str:
    return subprocess.run([sys.executable, "-m", "slurm_acme", "--db", db, *args], cwd=cwd,
                          check=True, capture_output=True, text=True, timeout=120).stdout


def recovery_times(before: list[dict], after: list[dict], known_ts: float) -> dict:
    """Detect/resume latencies from the failed attempt's and the next attempt's metrics."""
    last_progress = max(r["time"] for r in before if r.get("event") in ("step", "checkpoint", "resume"))
    first_step = min(r["time"] for r in after if r.get("event") == "step")
    return {"time_to_detect_s": round(known_ts - last_progress, 2),
            "time_to_resume_s": round(first_step - last_progress, 2)}


def run_acme(work: Path, args: argparse.Namespace) -> dict:
    import yaml

    db = f"sqlite:///{work / 'acme.db'}"
    spec = {"name": "bench-recovery-acme", "nodes": 2, "time": "00:20:00",
            "command": trainer_args(args.steps, args.interval), "env": {"ACME_FAULTS": fault(args.fault_step)},
            "checkpoint": {"dir": "ckpt", "interval": args.interval},
            "fault_tolerance": {"max_restarts": 2, "health_check": args.health_check,
                                "hang_timeout": 300}}
    (work / "train.yaml").write_text(yaml.safe_dump(spec))
    t0 = time.time()
    out = json.loads(sacme(db, "submit", "train.yaml", "--json", cwd=work))
    run_id, job_id = out["run_id"], out["job_id"]
    deadline = time.time() + args.timeout
    view: dict = {}
    while time.time() < deadline:
        view = json.loads(sacme(db, "status", run_id, "--json", cwd=work))
        if view["state"] in ("COMPLETED", "STOPPED"):
            break
        time.sleep(2)
    else:
        Slurm().scancel([job_id])
        raise SystemExit(f"acme run {run_id} did not finish in {args.timeout}s")
    attempts = view["attempts"]
    run_dir = work / "acme-runs" / run_id
    files = [run_dir / f"attempt-{a['attempt']}-{a['job_id']}.metrics.jsonl" for a in attempts]
    useful, _ = useful_seconds(files)
    wall = attempts[-1]["end_ts"] - attempts[0]["start_ts"]
    result = {"state": view["state"], "attempts": len(attempts), "submitted_to_done_s": round(time.time() - t0, 1),
              "wall_s": round(wall, 2), "useful_s": round(useful, 2),
              "goodput": round(useful / wall, 3), "excluded": view["excluded_nodes"],
              "resumed_from_step": attempts[-1]["resumed_from_step"]}
    if len(attempts) >= 2:
        result.update(recovery_times(read_records(files[0]), read_records(files[1]), attempts[0]["end_ts"]))
    return result


BASELINE_SCRIPT = """#!/bin/bash
# What a person would submit: srun the trainer, let Slurm requeue on request.
n=${{SLURM_RESTART_COUNT:-0}}
export ACME_METRICS_FILE={work}/metrics.$n.jsonl
export ACME_CKPT_DIR={work}/ckpt-$n
export ACME_FAULTS={faults}
export MASTER_ADDR=127.0.0.1
export MASTER_PORT=$((30000 + (SLURM_JOB_ID * 7 + n) % 20000))
srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 {argv}
"""


def run_baseline(work: Path, args: argparse.Namespace) -> dict:
    slurm = Slurm(timeout=60)
    script = BASELINE_SCRIPT.format(work=shlex.quote(str(work)), faults=shlex.quote(fault(args.fault_step)),
                                    argv=shlex.join(trainer_args(args.steps, args.interval)))
    first_start = time.time()
    job_id = slurm.sbatch(["--job-name=bench-recovery-baseline", "--nodes=2", "--ntasks-per-node=1",
                           "--requeue", "--time=00:20:00", f"--output={work}/slurm-%j.out",
                           "--open-mode=append", f"--chdir={work}"], script)
    deadline = time.time() + args.timeout
    failed_seen = None
    requeues = 0
    while time.time() < deadline:
        job = slurm.show_job(job_id)
        if job.state is JobState.COMPLETED:
            break
        if job.state.is_terminal():
            if failed_seen is None:
                failed_seen = time.time()
            if requeues >= 2:
                raise SystemExit(f"baseline job {job_id} failed again: {job.state.value}")
            slurm.requeue(job_id)  # the operator restarts it by hand
            requeues += 1
        time.sleep(args.operator_poll)
    else:
        slurm.scancel([job_id])
        raise SystemExit(f"baseline job {job_id} did not finish in {args.timeout}s")
    files = [work / f"metrics.{n}.jsonl" for n in range(requeues + 1)]
    useful, _ = useful_seconds(files)
    end = max(r["time"] for r in read_records(files[-1]))
    start = min((r["time"] for r in read_records(files[0])), default=first_start)
    wall = end - min(start, first_start)
    result = {"state": "COMPLETED", "attempts": requeues + 1, "wall_s": round(wall, 2),
              "useful_s": round(useful, 2), "goodput": round(useful / wall, 3)}
    if requeues and failed_seen is not None:
        result.update(recovery_times(read_records(files[0]), read_records(files[1]), failed_seen))
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--interval", type=int, default=5)
    p.add_argument("--fault-step", type=int, default=22)
    p.add_argument("--operator-poll", type=float, default=5.0)
    p.add_argument("--health-check", choices=("none", "allgather"), default="none")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    if not os.environ.get("SLURM_CONF"):
        raise SystemExit("set SLURM_CONF (eval \"$(sbin/acme-cluster env)\")")
    root = Path(args.dir or tempfile.mkdtemp(prefix="acme-bench-recovery-"))
    (root / "acme").mkdir(parents=True, exist_ok=True)
    (root / "baseline").mkdir(parents=True, exist_ok=True)
    acme = run_acme(root / "acme", args)
    base = run_baseline(root / "baseline", args)
    out = {
        "scenario": f"2 nodes, {args.steps} steps, checkpoint every {args.interval}, "
                    f"NCCL error on rank 1 at step {args.fault_step}",
        "time_to_detect_s": acme.get("time_to_detect_s"),
        "time_to_resume_s": acme.get("time_to_resume_s"),
        "goodput": acme["goodput"],
        "baseline_time_to_detect_s": base.get("time_to_detect_s"),
        "baseline_time_to_resume_s": base.get("time_to_resume_s"),
        "baseline_goodput": base["goodput"],
        "resume_speedup": (round(base["time_to_resume_s"] / acme["time_to_resume_s"], 2)
                           if acme.get("time_to_resume_s") and base.get("time_to_resume_s") else None),
        "operator_poll_s": args.operator_poll,
        "acme": acme,
        "baseline": base,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
