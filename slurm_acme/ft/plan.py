"""Plan, then submit: the frozen sbatch request for one fault-tolerant run.

``build_plan`` is pure (no Slurm, no store): ``--dry-run`` prints its result
and tests inspect it. The batch script only exports the run's identity and
``exec``s the in-job supervisor, so the signal Slurm sends (``B:USR2``) reaches
the supervisor itself; every value rendered into it is shell-quoted.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from slurm_acme import contracts as c
from slurm_acme.ft.sbatch_options import render_sbatch_options
from slurm_acme.ft.spec import TrainSpec
from slurm_acme.slurm import sbatch_argv

#: The job comment that tells ingest and the report this is a pretraining job.
COMMENT_TYPE = "acme:type=pretrain"


def new_run_id(name: str) -> str:
    slug = re.sub(r"[^a-zA-Z0-9]+", "-", name).strip("-").lower()[:24] or "run"
    return f"{slug}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class SubmitPlan:
    """Everything ``sacme submit`` will do, decided before anything is done (``--dry-run``)."""

    run_id: str
    spec: TrainSpec
    spec_path: str
    workdir: str
    run_dir: str
    db_url: str
    sbatch_options: tuple[str, ...]
    script: str
    #: The training step the supervisor starts in each attempt (``<nodeN>``: the
    #: allocation's nodes; the rendezvous address and port are picked at launch).
    training_step: tuple[str, ...] = ()

    @property
    def sbatch_argv(self) -> tuple[str, ...]:
        """The exact command :class:`slurm_acme.slurm.Slurm` runs (script on stdin)."""
        return tuple(sbatch_argv(self.sbatch_options))

    @property
    def node_split(self) -> str:
        """How the allocation is used: training nodes and idle spares."""
        ft = self.spec.fault_tolerance
        if not ft.in_place:
            return (f"{self.spec.nodes} node(s), all training; a failure requeues the job "
                    "(no spares)")
        return (f"{self.spec.allocated_nodes} node(s) allocated: {self.spec.nodes} training, "
                f"{ft.spare_count} spare(s) idle; a failed node is replaced by a spare and a "
                "transient failure restarts the step, inside the allocation")

    def render(self) -> str:
        """What ``--dry-run`` prints: the argv (shell-quoted, to copy) and the script."""
        return (f"# run {self.run_id}\n# argv (script on stdin):\n"
                f"{shlex.join(self.sbatch_argv)}\n# script:\n{self.script}"
                f"# training step, started by the supervisor in each attempt:\n"
                f"{shlex.join(self.training_step)}\n# nodes: {self.node_split}\n")


def sbatch_options(spec: TrainSpec, *, run_id: str, workdir: str, run_dir: str) -> tuple[str, ...]:
    opts = [f"--job-name={spec.name}", f"--nodes={spec.allocated_nodes}",
            f"--ntasks-per-node={spec.ntasks_per_node}"]
    if spec.gpus_per_node:
        opts.append(f"--gpus-per-node={spec.gpus_per_node}")
    if spec.cpus_per_task:
        opts.append(f"--cpus-per-task={spec.cpus_per_task}")
    for flag, value in (("partition", spec.partition), ("time", spec.time),
                        ("account", spec.account), ("qos", spec.qos)):
        if value:
            opts.append(f"--{flag}={value}")
    if spec.fault_tolerance.exclude:
        opts.append(f"--exclude={','.join(spec.fault_tolerance.exclude)}")
    opts += [
        "--requeue",
        f"--signal=B:USR2@{spec.fault_tolerance.signal_lead}",
        f"--comment={COMMENT_TYPE} acme:run={run_id}",
        f"--chdir={workdir}",
        f"--output={run_dir}/slurm-%j.out",
        "--open-mode=append",
    ]
    opts += render_sbatch_options(spec.sbatch)
    return tuple(opts)


def render_script(*, run_id: str, name: str, workdir: str, run_dir: str, db_url: str,
                  python: str, config_path: str | None) -> str:
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        # No user value goes into a comment: shell quoting does not protect a comment line.
        "# slurm-acme fault-tolerant run, written by `sacme submit`.",
        "# The supervisor records every attempt and decides every restart.",
        f"export {c.ENV_RUN_ID}={q(run_id)}",
        f"export {c.ENV_DB}={q(db_url)}",
        f"export {c.ENV_RUN_DIR}={q(run_dir)}",
    ]
    if config_path:
        lines.append(f"export {c.ENV_CONF}={q(config_path)}")
    lines += [f"cd {q(workdir)} || exit 1",
              f"exec {q(python)} -m slurm_acme supervise {q(run_id)}", ""]
    return "\n".join(lines)


def build_plan(spec: TrainSpec, *, spec_path: str, db_url: str, run_id: str | None = None,
               python: str | None = None, config_path: str | None = None,
               cwd: str | None = None) -> SubmitPlan:
    """Everything ``sacme submit`` will do, decided up front and frozen."""
    run_id = run_id or new_run_id(spec.name)
    base = Path(cwd or os.getcwd())
    workdir = str((base / spec.workdir).resolve() if spec.workdir else base.resolve())
    run_dir = c.run_dir_for(workdir, run_id)
    script = render_script(run_id=run_id, name=spec.name, workdir=workdir, run_dir=run_dir,
                           db_url=db_url, python=python or sys.executable,
                           config_path=config_path)
    return SubmitPlan(run_id=run_id, spec=spec, spec_path=spec_path, workdir=workdir,
                      run_dir=run_dir, db_url=db_url,
                      sbatch_options=sbatch_options(spec, run_id=run_id, workdir=workdir,
                                                    run_dir=run_dir),
                      script=script, training_step=training_step(spec))


def training_step(spec: TrainSpec) -> tuple[str, ...]:
    """The training step's srun argv, with placeholders for what only the job knows."""
    from slurm_acme.ft.launch import srun_argv

    nodes = [f"<node{i}>" for i in range(1, spec.nodes + 1)]
    return srun_argv(spec, nodes, endpoint="<node1>:<port>", run_id="<run>-<attempt>")
