#!/usr/bin/env python3
"""Recovery of the user's own training script: ``sacme submit`` vs submitit vs ``sbatch --requeue``.

Every tool runs the same unmodified script, ``examples/train_plain_ddp.py`` (DDP,
gloo, 2 nodes of the local cluster, its own ``torch.save`` checkpoints every
``--every`` steps and its own ``--resume``; it prints ``step N loss L time T``).
Two scenarios:

* ``rank``: at step ``--fault-step`` of the first run, the rank on the second
  node prints an NCCL error and is killed (SIGKILL);
* ``time_limit``: once the run reaches step ``--signal-step``, the time-limit
  warning arrives (delivered now, as each tool asks Slurm for it:
  ``scancel --batch --signal=USR2`` for sacme's ``--signal=B:USR2@lead``,
  ``scancel --signal=USR2`` for submitit's ``--signal=USR2@delay``).

The tools, as a user would set each up:

* ``sacme``: ``sacme submit`` of a train.yaml whose command passes
  ``--resume "$ACME_RESUME_FROM"``; nothing else.
* ``submitit`` (PyPI ``submitit``): its ``Checkpointable`` requeue pattern: a
  callable that resumes from the newest of the script's checkpoints and whose
  ``checkpoint()`` asks for a requeue with the same arguments; 2 nodes x 1 task,
  ``TorchDistributedEnvironment`` for the rendezvous. submitit requeues on the
  time-limit signal; an application crash ends the job.
* ``requeue``: the script under ``srun`` in a plain ``sbatch --requeue`` script
  that resumes from the newest checkpoint; an operator polls ``squeue`` every
  ``--operator-poll`` seconds (an attentive on-call: a lower bound for a
  person) and runs ``scontrol requeue`` when the job failed. Slurm's requeue
  delay applies.

Recovery that keeps the allocation (``fault_tolerance.spares``, issue 19) is
the tool ``sacme_spares``: ``sacme submit`` of the same train.yaml with
``spares: 1`` (3 nodes allocated, 2 training). It runs beside ``sacme`` (its
requeue) in the ``rank`` scenario and in a third one:

* ``busy``: the ``rank`` fault on a busy cluster. A filler job holds one node
  (``--exclusive``) for the whole run; once training runs, a competing
  exclusive 2-node job that runs for a fixed 60 s waits in the queue (at a higher priority, as queued work at a
  site would be) and takes any nodes a requeue frees.

Per tool and scenario: ``recovered``; ``allocation_kept`` (sacme tools: the
recovery stayed in the same allocation, no requeue); ``resume_s``, from the last good step
before the failure to the first resumed step; ``steps_lost``, steps trained
after the checkpoint it resumed from; ``goodput``, time of the steps that count
toward the final model (the last execution of each) over wall time from
submit to the last step; for the sacme tools also ``gpu_goodput`` (``sacme
status``: useful training GPU time over allocated GPU time, idle spares
included). Prints one JSON object; ``spares_vs_requeue`` gives the ratio of
``resume_s`` per scenario.

Usage: ``python bench/recovery.py [--scenarios rank,time_limit,busy] [--tools sacme,sacme_spares,submitit,requeue]``.
Needs the local cluster (``sbin/acme-cluster up``) and ``SLURM_CONF``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurm_acme.ports import free_port
from slurm_acme.slurm import JobState, Slurm, run_slurm

SCRIPT = REPO / "examples" / "train_plain_ddp.py"
FAULT_MESSAGE = "RuntimeError: NCCL error: unhandled system error, NCCL version 2.21.5"
_STEP = re.compile(r"(?:^|\s)step (\d+) loss \S+ time ([0-9.]+)")
_RESUMED = re.compile(r"resumed from \S+ at step (\d+)")


def script_args(args: argparse.Namespace, scenario: str, ckpt: Path) -> list[str]:
    argv = ["--steps", str(args.steps), "--ckpt-every", str(args.every), "--ckpt-dir", str(ckpt),
            "--step-seconds", str(args.step_seconds)]
    if scenario in ("rank", "busy"):
        argv += ["--simulate-failure", f"{args.fault_step}:{FAULT_MESSAGE}"]
    return argv


#: The first node's address as Slurm knows it (NodeAddr): the local cluster's node names do
#: not resolve (all its nodes are 127.0.0.1); a real cluster's would, and this is a no-op there.
MASTER_ADDR_SH = ('$(scontrol show node "$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)" '
                  '| grep -o "NodeAddr=[^ ]*" | cut -d= -f2)')


def newest_checkpoint(ckpt: Path) -> str:
    files = sorted(ckpt.glob("ckpt_step_*.pt"))
    return str(files[-1]) if files else ""


# ------------------------------------------------------------------ reading runs

def runs_in(text: str) -> list[dict]:
    """The runs (attempts) in a log: each a list of (step, time) and the step it resumed from."""
    runs: list[dict] = [{"resumed": None, "steps": []}]
    for line in text.splitlines():
        resumed = _RESUMED.search(line)
        if resumed and runs[-1]["steps"]:  # every rank says it resumed: one new run
            runs.append({"resumed": int(resumed.group(1)), "steps": []})
        elif resumed:
            runs[-1]["resumed"] = int(resumed.group(1))
        step = _STEP.search(line)
        if step:
            runs[-1]["steps"].append((int(step.group(1)), float(step.group(2))))
    return [r for r in runs if r["steps"] or r["resumed"] is not None]


def measure(runs: list[dict], *, submitted: float, steps: int) -> dict:
    """resume_s, steps_lost and goodput from the runs of one job (see the module docstring)."""
    out: dict = {"attempts": len(runs)}
    done = bool(runs) and bool(runs[-1]["steps"]) and runs[-1]["steps"][-1][0] == steps
    out["recovered"] = done and len(runs) > 1
    out["completed"] = done
    gaps = [b[1] - a[1] for r in runs for a, b in zip(r["steps"], r["steps"][1:], strict=False)]
    typical = statistics.median(gaps) if gaps else 0.0
    final: dict[int, float] = {}
    for r in runs:
        previous = None
        for step, ts in r["steps"]:
            final[step] = ts - previous if previous is not None else typical
            previous = ts
    if len(runs) > 1 and runs[0]["steps"]:
        last_good, last_ts = runs[0]["steps"][-1]
        resumed_from = runs[1]["resumed"] or 0
        first = runs[1]["steps"][0][1] if runs[1]["steps"] else None
        out["resume_s"] = round(first - last_ts, 2) if first is not None else None
        out["steps_lost"] = last_good - resumed_from
    if done:
        wall = runs[-1]["steps"][-1][1] - submitted
        out["goodput"] = round(sum(final.values()) / wall, 3) if wall > 0 else None
    return out


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def reached(log: Callable[[], str], step: int) -> bool:
    runs = runs_in(log())
    return bool(runs) and any(s >= step for s, _ in runs[0]["steps"])


def read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


# ------------------------------------------------------------------ sacme

def run_sacme_spares(work: Path, scenario: str, args: argparse.Namespace) -> dict:
    return run_sacme(work, scenario, args, spares=1)


def run_sacme(work: Path, scenario: str, args: argparse.Namespace,
              spares: int | None = None) -> dict:
    import yaml

    db = f"sqlite:///{work / 'acme.db'}"
    ckpt = work / "ckpt"
    command = shlex.join([sys.executable, str(SCRIPT), *script_args(args, scenario, ckpt)])
    # The script simulates its failure in the first run only (SLURM_RESTART_COUNT 0); a
    # restart inside the allocation keeps that count, so it is told the attempt instead.
    command = 'SLURM_RESTART_COUNT="${ACME_ATTEMPT:-0}" ' + command
    ft: dict = {"max_restarts": 2, "health_check": args.health_check, "hang_timeout": 300,
                "signal_lead": 60}
    if spares is not None:
        ft["spares"] = spares
    tool = "sacme" if spares is None else "sacme_spares"
    spec = {"name": f"bench-recovery-{tool}-{scenario}", "nodes": 2, "time": "00:20:00",
            "command": command + ' --resume "${ACME_RESUME_FROM:-}"',
            "env": {"OMP_NUM_THREADS": "1"}, "checkpoint": {"dir": str(ckpt)},
            "fault_tolerance": ft}
    (work / "train.yaml").write_text(yaml.safe_dump(spec))
    sacme = [sys.executable, "-m", "slurm_acme", "--db", db]
    slurm = Slurm(timeout=60)
    busy = Busy(slurm, work) if scenario == "busy" else None
    submitted = time.time()
    out = json.loads(subprocess.run([*sacme, "submit", "train.yaml", "--json"], cwd=work, check=True,
                                    capture_output=True, text=True, timeout=120).stdout)
    run_id, job_id = out["run_id"], out["job_id"]
    run_dir = work / "acme-runs" / run_id

    def log() -> str:
        logs = [p for p in run_dir.glob("attempt-*.log") if not p.name.endswith(".compressed.log")]
        return "".join(read(p) for p in sorted(logs, key=lambda p: int(p.name.split("-")[1])))

    def state() -> str:
        view = subprocess.run([*sacme, "status", run_id, "--json"], capture_output=True, text=True,
                              timeout=120, check=True).stdout
        return json.loads(view)["state"]

    try:
        if busy is not None:
            wait_for(lambda: reached(log, 1), args.timeout, "the first step")
            busy.compete()
        if scenario == "time_limit":
            wait_for(lambda: reached(log, args.signal_step), args.timeout, "the signal step")
            run_slurm(["scancel", "--batch", "--signal=USR2", job_id], timeout=30)
        wait_for(lambda: state() in ("COMPLETED", "STOPPED", "CANCELLED"), args.timeout, "the run")
    finally:
        Slurm().scancel([job_id])
        if busy is not None:
            busy.end()
    runs = runs_in(log())
    result = {"tool": tool, **measure(runs, submitted=submitted, steps=args.steps)}
    if busy is not None:
        result["competitor_started_during_recovery"] = busy.started_before(
            runs[1]["steps"][0][1] if len(runs) > 1 and runs[1]["steps"] else time.time())
    view = json.loads(subprocess.run([*sacme, "status", run_id, "--json"], capture_output=True,
                                     text=True, timeout=120, check=True).stdout)
    attempts = view["attempts"]
    if len(attempts) > 1 and len(runs) > 1 and runs[0]["steps"] and runs[1]["steps"]:
        # where the time went: the decision, the requeue (back in the queue, prolog, the
        # next supervisor), the trainer's start-up (Python, torch, rendezvous, its resume)
        # (with spares, "requeue" is the restart inside the allocation; the suspects'
        # health check, when on, is part of "detect", the decision)
        result["parts_s"] = {
            "detect": round(attempts[0]["end_ts"] - runs[0]["steps"][-1][1], 2),
            "requeue" if spares is None else "restart_in_place":
                round(attempts[1]["start_ts"] - attempts[0]["end_ts"], 2),
            "start_up": round(runs[1]["steps"][0][1] - attempts[1]["start_ts"], 2)}
    result["outcomes"] = [a["outcome"] for a in attempts]
    result["allocation_kept"] = len(attempts) > 1 and slurm.show_job(job_id).restarts == 0
    result["replaced"] = [a.get("replaced") for a in attempts if a.get("replaced") is not None]
    result["gpu_goodput"] = view["goodput"]
    result["nodes_allocated"] = view["allocated_nodes"]
    return result


COMPETITOR_S = 60


class Busy:
    """The busy cluster: a filler job holding one node, then a competing 2-node job that
    runs for a fixed 60 s and waits in the queue ahead of a requeued job."""

    def __init__(self, slurm: Slurm, work: Path) -> None:
        self.slurm, self.work = slurm, work
        # --exclusive: the local cluster's jobs share nodes by CPU; a busy node is whole
        self.filler = slurm.sbatch(["--job-name=bench-busy-filler", "--nodes=1", "--exclusive",
                                    "--time=00:30:00",
                                    f"--output={work}/filler-%j.out"],
                                   "#!/bin/bash\nsleep 1800\n")
        self.competitor: str | None = None
        wait_for(lambda: self.slurm.show_job(self.filler).state is JobState.RUNNING, 120,
                 "the filler job")

    def compete(self) -> None:
        self.competitor = self.slurm.sbatch(
            ["--job-name=bench-busy-competitor", "--nodes=2", "--exclusive", "--time=00:10:00",
             f"--output={self.work}/competitor-%j.out"],
            f"#!/bin/bash\ndate +%s.%N\nsleep {COMPETITOR_S}\n")
        # queued work ahead of a requeued job: the scheduler's order, made explicit
        self.slurm.update_job(self.competitor, Priority=str(4_294_000_000))

    def started_before(self, ts: float) -> bool | None:
        """Whether the competitor started before ``ts`` (it took nodes a requeue freed)."""
        if self.competitor is None:
            return None
        out = read(self.work / f"competitor-{self.competitor}.out").split()
        return bool(out) and float(out[0]) < ts

    def end(self) -> None:
        self.slurm.scancel([j for j in (self.filler, self.competitor) if j])


# ------------------------------------------------------------------ submitit

def _submitit_callable(script: str, argv: list[str], ckpt: str):  # type: ignore[no-untyped-def]
    import submitit

    class Train(submitit.helpers.Checkpointable):
        """Resume from the newest of the script's own checkpoints, run it, requeue on timeout."""

        def __init__(self, script: str, argv: list[str], ckpt: str) -> None:
            self.script, self.argv, self.ckpt = script, argv, ckpt

        def __call__(self) -> int:
            # MASTER_PORT is set free by the setup lines (its job-id default collides across
            # clusters that share a host); export() keeps it with overwrite
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False,
                                                                   overwrite=True)
            os.environ["MASTER_ADDR"] = os.environ.get("BENCH_MASTER_ADDR") or os.environ["MASTER_ADDR"]
            sys.argv = [self.script, *self.argv, "--resume", newest_checkpoint(Path(self.ckpt))]
            try:
                runpy.run_path(self.script, run_name="__main__")
            except SystemExit as exc:
                if exc.code not in (0, None):
                    raise
            return 0

    return Train(script, argv, ckpt)


def run_submitit(work: Path, scenario: str, args: argparse.Namespace) -> dict:
    import submitit

    ckpt = work / "ckpt"
    executor = submitit.AutoExecutor(folder=str(work / "submitit"), cluster="slurm")
    executor.update_parameters(nodes=2, tasks_per_node=1, cpus_per_task=1, timeout_min=20,
                               slurm_signal_delay_s=60, slurm_setup=[
                                   f"export MASTER_PORT={free_port()}", "export OMP_NUM_THREADS=1",
                                   f"export BENCH_MASTER_ADDR={MASTER_ADDR_SH}"],
                               name=f"bench-recovery-submitit-{scenario}")
    submitted = time.time()
    job = executor.submit(_submitit_callable(str(SCRIPT), script_args(args, scenario, ckpt), str(ckpt)))
    slurm = Slurm(timeout=60)

    def log() -> str:
        return read(Path(str(job.paths.stdout).replace("%t", "0")))

    try:
        if scenario == "time_limit":
            wait_for(lambda: reached(log, args.signal_step), args.timeout, "the signal step")
            run_slurm(["scancel", "--signal=USR2", job.job_id], timeout=30)  # job._interrupt(timeout=True)
        wait_for(lambda: slurm.show_job(job.job_id).state.is_terminal(), args.timeout, "the job")
    finally:
        slurm.scancel([job.job_id])
    return {"tool": "submitit", "final_state": slurm.show_job(job.job_id).state.value,
            **measure(runs_in(log()), submitted=submitted, steps=args.steps)}


# ------------------------------------------------------------------ plain requeue

REQUEUE_SCRIPT = """#!/bin/bash
# What a person submits: srun the script, resume from its newest checkpoint, --requeue.
export OMP_NUM_THREADS=1 MASTER_ADDR={master_addr}
export MASTER_PORT={port}
resume=$(ls {ckpt}/ckpt_step_*.pt 2>/dev/null | sort | tail -1)
srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 {argv} --resume "$resume"
"""


def run_requeue(work: Path, scenario: str, args: argparse.Namespace) -> dict:
    slurm = Slurm(timeout=60)
    ckpt = work / "ckpt"
    script = REQUEUE_SCRIPT.format(port=free_port(), ckpt=shlex.quote(str(ckpt)),
                                   master_addr=MASTER_ADDR_SH,
                                   argv=shlex.join([sys.executable, str(SCRIPT),
                                                    *script_args(args, scenario, ckpt)]))
    submitted = time.time()
    job_id = slurm.sbatch([f"--job-name=bench-recovery-requeue-{scenario}", "--nodes=2",
                           "--ntasks-per-node=1", "--requeue", "--time=00:20:00",
                           f"--output={work}/slurm-%j.out", "--open-mode=append",
                           f"--chdir={work}"], script)
    output = work / f"slurm-{job_id}.out"
    requeues = 0
    deadline = time.monotonic() + args.timeout
    try:
        while time.monotonic() < deadline:
            job = slurm.show_job(job_id)
            if job.state is JobState.COMPLETED:
                break
            if job.state.is_terminal():
                if requeues >= 2:
                    break
                slurm.requeue(job_id)  # the operator restarts it by hand
                requeues += 1
            time.sleep(args.operator_poll)
    finally:
        slurm.scancel([job_id])
    return {"tool": "requeue", "operator_poll_s": args.operator_poll,
            **measure(runs_in(read(output)), submitted=submitted, steps=args.steps)}


TOOLS: dict[str, Callable[[Path, str, argparse.Namespace], dict]] = {
    "sacme": run_sacme, "sacme_spares": run_sacme_spares, "submitit": run_submitit,
    "requeue": run_requeue}
#: The plain requeue has no time-limit handling: the job ends TIMEOUT like a crash; the
#: busy cluster compares the two sacme recoveries; a time limit is never recovered in place.
SKIP = {("requeue", "time_limit"), ("submitit", "busy"), ("requeue", "busy"),
        ("sacme_spares", "time_limit")}


def spares_vs_requeue(results: dict[str, dict[str, dict]]) -> dict[str, float | None]:
    """Per scenario, sacme_spares' resume_s over sacme's (requeue's)."""
    out: dict[str, float | None] = {}
    for scenario, tools in results.items():
        spare, requeue = (tools.get(t, {}).get("resume_s") for t in ("sacme_spares", "sacme"))
        if spare is not None and requeue:
            out[scenario] = round(spare / requeue, 3)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", default="rank,time_limit,busy")
    p.add_argument("--tools", default="sacme,sacme_spares,submitit,requeue")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--step-seconds", type=float, default=0.3)
    p.add_argument("--fault-step", type=int, default=22)
    p.add_argument("--signal-step", type=int, default=22)
    p.add_argument("--operator-poll", type=float, default=5.0)
    p.add_argument("--health-check", choices=("none", "allgather"), default="none")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    if not os.environ.get("SLURM_CONF"):
        raise SystemExit("set SLURM_CONF (eval \"$(sbin/acme-cluster env)\")")
    root = Path(args.dir or tempfile.mkdtemp(prefix="acme-bench-recovery-"))
    results: dict[str, dict[str, dict]] = {}
    for scenario in args.scenarios.split(","):
        for tool in args.tools.split(","):
            if (tool, scenario) in SKIP:
                continue
            work = root / scenario / tool
            work.mkdir(parents=True, exist_ok=True)
            try:
                results.setdefault(scenario, {})[tool] = TOOLS[tool](work, scenario, args)
            except (TimeoutError, subprocess.CalledProcessError) as exc:
                results.setdefault(scenario, {})[tool] = {"tool": tool, "error": str(exc)[-300:]}
            print(f"{scenario}/{tool}: {json.dumps(results[scenario][tool])}", file=sys.stderr)
    print(json.dumps({
        "script": "examples/train_plain_ddp.py (unmodified), 2 nodes, gloo",
        "steps": args.steps, "checkpoint_every": args.every, "step_seconds": args.step_seconds,
        "fault": f"rank on node 2 killed at step {args.fault_step} after an NCCL error",
        "time_limit": f"warning signal at step {args.signal_step}",
        "busy": f"a filler job on 1 node; a competing 2-node {COMPETITOR_S} s job queued ahead",
        "spares_vs_requeue": spares_vs_requeue(results),
        "results": results, "dir": str(root)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
