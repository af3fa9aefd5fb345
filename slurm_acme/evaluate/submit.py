"""From a plan to Slurm jobs: first a frozen, printable job plan, then its execution.

``jobs`` mode, per node k (pinned with ``--nodelist``):

- ``preload-k``: copy the checkpoint to node-local memory once;
- ``gpu-k``: an array, one task per trial in planned start order, at most
  GPUs-per-node at a time, ``afterok:preload-k``;
- ``score-k``: a CPU array, ``aftercorr:gpu-k`` (task i scores trial i as soon
  as it finishes, while later trials still run on the GPUs);
- ``cleanup-k``: removes the local copy, ``afterany:gpu-k``;

and one ``aggregate`` job, ``afterany`` on every scoring array, which writes
results and measured runtimes into the store.

``allocation`` mode (job_container/tmpfs sites) replaces preload/gpu/cleanup
by one ``node-k`` job that holds the node's GPUs, preloads and runs the trials
as srun steps; its scoring array waits ``afterok`` on it.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from slurm_acme.errors import AcmeError
from slurm_acme.evaluate.spec import RunSpec
from slurm_acme.slurm.client import sbatch_argv


@dataclass(frozen=True)
class JobSpec:
    """One sbatch call: its options, its script, and what it waits for (by key)."""

    key: str
    options: tuple[str, ...]
    script: str
    after: tuple[tuple[str, str], ...] = ()  # (dependency type, job key)


@dataclass(frozen=True)
class JobPlan:
    eval_id: str
    mode: str
    run_dir: str
    jobs: tuple[JobSpec, ...]

    def job(self, key: str) -> JobSpec:
        return next(j for j in self.jobs if j.key == key)

    def render(self) -> str:
        """The exact sbatch argv and script of every job, for ``--dry-run``."""
        lines = []
        for job in self.jobs:
            dep = ",".join(f"{kind}:<{key}>" for kind, key in job.after)
            argv = sbatch_argv(job.options, dep or None)
            lines.append(f"# {job.key}\n{shlex.join(argv)}\n{job.script}")
        return "\n".join(lines)


@dataclass(frozen=True)
class SubmitSettings:
    partition: str = ""
    cpu_partition: str = ""
    cpus_per_score_task: int = 2
    gpus_per_node: int = 8
    time_limit: str = "01:00:00"
    python: str = sys.executable


def _script(settings: SubmitSettings, *args: str) -> str:
    call = shlex.join([settings.python, "-m", "slurm_acme.evaluate.worker", *args])
    return f"#!/bin/bash\nset -euo pipefail\n{call}\n"


def _array_script(settings: SubmitSettings, *args: str) -> str:
    call = shlex.join([settings.python, "-m", "slurm_acme.evaluate.worker", *args])
    return f'#!/bin/bash\nset -euo pipefail\n{call} --index "$SLURM_ARRAY_TASK_ID"\n'


def job_name(eval_id: str, name: str) -> str:
    return f"seval-{eval_id}-{name}"


def log_path(run_dir: str | Path, job: str, job_id: str, task: int | None = None) -> Path:
    """Where a job's (or an array task's) Slurm log is: what ``--output`` below expands to."""
    stem = f"{job}-{job_id}_{task}" if task is not None else f"{job}-{job_id}"
    return Path(run_dir) / "logs" / f"{stem}.out"


def _common(spec: RunSpec, run_dir: Path, settings: SubmitSettings, name: str, *, gpu: bool,
            array: bool = False) -> list[str]:
    logs = run_dir / "logs"
    pattern = "%x-%A_%a.out" if array else "%x-%j.out"
    opts = [f"--job-name={job_name(spec.eval_id, name)}", f"--time={settings.time_limit}",
            f"--output={logs}/{pattern}", "--kill-on-invalid-dep=yes", "--comment=acme:type=Eval"]
    partition = settings.partition if gpu else (settings.cpu_partition or settings.partition)
    if partition:
        opts.append(f"--partition={partition}")
    return opts


def build_job_plan(spec: RunSpec, run_dir: Path, settings: SubmitSettings, mode: str = "jobs") -> JobPlan:
    """The whole evaluation as sbatch calls; nothing is submitted here."""
    rd = str(run_dir)
    jobs: list[JobSpec] = []
    score_keys = []
    for k, node in enumerate(spec.nodes):
        trials = spec.node_trials(k)
        if not trials:
            continue
        last = len(trials) - 1
        pin = [f"--nodelist={node}", "--nodes=1", "--ntasks=1"]
        if mode == "allocation":
            width = min(settings.gpus_per_node, len(trials))
            jobs.append(JobSpec(f"node-{k}", tuple(
                _common(spec, run_dir, settings, f"node{k}", gpu=True) + pin[:2]
                + [f"--ntasks={width}", f"--gres=gpu:{width}", "--cpus-per-task=1"]),
                _script(settings, "node", "--run-dir", rd, "--node", str(k))))
            gpu_key, gpu_dep = f"node-{k}", "afterok"
        else:
            jobs.append(JobSpec(f"preload-{k}", tuple(
                _common(spec, run_dir, settings, f"preload{k}", gpu=False) + pin + ["--cpus-per-task=1"]),
                _script(settings, "preload", "--run-dir", rd, "--node", str(k))))
            jobs.append(JobSpec(f"gpu-{k}", tuple(
                _common(spec, run_dir, settings, f"gpu{k}", gpu=True, array=True) + pin
                + [f"--array=0-{last}%{settings.gpus_per_node}", "--gres=gpu:1", "--cpus-per-task=1"]),
                _array_script(settings, "trial", "--run-dir", rd, "--node", str(k)),
                after=(("afterok", f"preload-{k}"),)))
            jobs.append(JobSpec(f"cleanup-{k}", tuple(
                _common(spec, run_dir, settings, f"cleanup{k}", gpu=False) + pin + ["--cpus-per-task=1"]),
                _script(settings, "cleanup", "--run-dir", rd, "--node", str(k)),
                after=(("afterany", f"gpu-{k}"),)))
            gpu_key, gpu_dep = f"gpu-{k}", "aftercorr"
        jobs.append(JobSpec(f"score-{k}", tuple(
            [*_common(spec, run_dir, settings, f"score{k}", gpu=False), "--nodes=1", "--ntasks=1",
             f"--array=0-{last}", f"--cpus-per-task={settings.cpus_per_score_task}"]),
            _array_script(settings, "score", "--run-dir", rd, "--node", str(k)),
            after=((gpu_dep, gpu_key),)))
        score_keys.append(f"score-{k}")
    jobs.append(JobSpec("aggregate", tuple(
        [*_common(spec, run_dir, settings, "aggregate", gpu=False), "--nodes=1", "--ntasks=1", "--cpus-per-task=1"]),
        _script(settings, "aggregate", "--run-dir", rd),
        after=tuple(("afterany", key) for key in score_keys)))
    return JobPlan(spec.eval_id, mode, rd, tuple(jobs))


class SubmitFailed(AcmeError):
    """A job of the plan was refused; the ones already submitted were cancelled."""


def execute(plan: JobPlan, slurm) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Submit in order, filling dependencies with real job ids; all or nothing."""
    ids: dict[str, str] = {}
    try:
        for job in plan.jobs:
            options = list(job.options)
            if job.after:
                options.append("--dependency=" + ",".join(f"{kind}:{ids[key]}" for kind, key in job.after))
            ids[job.key] = slurm.sbatch(options, job.script)
    except AcmeError as exc:  # the door's SlurmError and friends
        if ids:
            slurm.scancel(list(ids.values()))
        raise SubmitFailed(f"submitting {job.key} failed, cancelled {len(ids)} submitted job(s): {exc}") from None
    return ids
