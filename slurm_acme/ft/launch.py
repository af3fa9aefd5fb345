"""How the supervisor starts the training command: the step's shape, argv and environment.

Two launchers (``launch`` in train.yaml):

* ``srun``: every task runs the command; ``ntasks_per_node`` tasks per node,
  ranks in srun's block order (task ``r`` on node ``r // ntasks_per_node``),
  rendezvous through ``MASTER_ADDR``/``MASTER_PORT`` (torch's ``env://``);
* ``torchrun``: one task per node runs a torchrun agent, which starts
  ``ntasks_per_node`` workers; the agents meet through c10d rendezvous on the
  first node of the allocation. torchrun's own restarts are off
  (``--max-restarts=0``): the supervisor decides restarts.

The rendezvous port is picked free on the master node at each launch (never
derived from the job id: job ids of different clusters on one host collide,
and a restart inside the allocation needs a fresh port while the old one may
still linger in TIME_WAIT).

srun is spelled and started by the door, :mod:`slurm_acme.slurm`; every argv
here is a list, never a shell string.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_acme import contracts as c
from slurm_acme.errors import InputError
from slurm_acme.ft.spec import TrainSpec
from slurm_acme.health.transport import PortPicker
from slurm_acme.slurm import Slurm, StepRequest, run_step, step_argv


@dataclass(frozen=True)
class Launch:
    """One training step as launched: its argv, environment and task layout."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    nodes: tuple[str, ...]
    #: srun tasks per node of this step (1 for torchrun: one agent per node).
    tasks_per_node: int
    #: Whether an srun task id is the trainer's global rank (srun launch) or a node's
    #: torchrun agent (whose workers' ranks the rendezvous assigns).
    task_is_rank: bool = True
    master_addr: str = ""
    port: int = 0

    def node_of_task(self, task: int | None) -> str | None:
        """srun's default block distribution: tasks fill a node before the next."""
        if task is None or not self.nodes:
            return None
        index = task // self.tasks_per_node
        return self.nodes[index] if 0 <= index < len(self.nodes) else None

    def task_nodes(self) -> dict[int, str] | None:
        """Global rank -> node for the diagnoser; None when ranks are not srun's tasks."""
        if not self.task_is_rank:
            return None
        return {task: self.nodes[task // self.tasks_per_node]
                for task in range(len(self.nodes) * self.tasks_per_node)}


# ------------------------------------------------------------------ ports

_ports = PortPicker()
#: The worker :func:`probe_port` runs on a remote master node.
_PROBE = "from slurm_acme.ports import free_port; print(free_port())"


def local_node(env: Mapping[str, str]) -> str:
    """The node this process runs on, as Slurm names it."""
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def probe_port(job_id: str, node: str, *, timeout: float = 60.0) -> int:
    """A port free on ``node``, asked of ``node`` itself by a one-task step of the job."""
    request = StepRequest(job_id=job_id, nodelist=(node,), nodes=1, ntasks=1, overlap=True,
                          quiet=True)
    out = run_step(request, [sys.executable, "-c", _PROBE], timeout=timeout)
    words = out.stdout.split()
    if out.returncode != 0 or not words or not words[-1].isdigit():
        raise InputError(f"cannot find a free port on {node}: {out.stderr.strip()[-300:]}")
    return int(words[-1])


def rendezvous_port(master: str, *, here: str, job_id: str,
                    probe: Callable[[str, str], int] = lambda job, node: probe_port(job, node)
                    ) -> int:
    """A free port on the master node: picked locally when the supervisor runs there
    (the batch host is the allocation's first node), else probed on it."""
    if master in (here, "localhost") or not job_id:
        return _ports()
    return probe(job_id, master)


def node_addr(node: str, *, timeout: float = 30.0) -> str | None:
    """Slurm's ``NodeAddr`` of ``node``, or None when Slurm reports none.

    Raises :class:`slurm_acme.slurm.SlurmError` when Slurm cannot answer.
    """
    return Slurm(timeout=timeout).node_addresses([node]).get(node)


def resolve_address(node: str, node_addr: str | None) -> str:
    """Slurm's NodeAddr when it has one (the truth for the cluster), else DNS."""
    if node_addr and node_addr != node:
        return node_addr
    try:
        return socket.gethostbyname(node)
    except OSError:
        return node_addr or node


# ------------------------------------------------------------------ argv

def step_request(spec: TrainSpec, nodes: Sequence[str]) -> StepRequest:
    """The training step's shape: every task on ``nodes``, labelled, unbuffered, and
    killed as a whole when one task fails (so the supervisor sees the failure)."""
    per_node = 1 if spec.launch == "torchrun" else spec.ntasks_per_node
    return StepRequest(nodes=len(nodes), nodelist=tuple(nodes), ntasks_per_node=per_node,
                       ntasks=len(nodes) * per_node, label=True, kill_on_bad_exit=True,
                       export="ALL", unbuffered=True)


def torchrun_command(spec: TrainSpec, env: Mapping[str, str] | None = None) -> list[str]:
    """How to start torchrun: ``spec.torchrun``, else torchrun beside the command's Python,
    else ``torchrun`` on PATH."""
    if spec.torchrun:
        return list(spec.torchrun)
    first = spec.argv[0]
    if Path(first).name.startswith("python") and os.sep in first:
        beside = Path(first).parent / "torchrun"
        if beside.is_file():
            return [str(beside)]
    path = (env or os.environ).get("PATH")
    found = shutil.which("torchrun", path=path)
    return [found] if found else ["torchrun"]


def torchrun_argv(spec: TrainSpec, nodes: Sequence[str], *, endpoint: str, run_id: str,
                  env: Mapping[str, str] | None = None) -> list[str]:
    """One agent per node: c10d rendezvous at ``endpoint``, ``ntasks_per_node`` workers,
    no restarts of its own. A ``.py`` script runs under torchrun's Python; anything else
    (``python train.py``, a wrapper) runs as given (``--no-python``)."""
    argv = [*torchrun_command(spec, env), f"--nnodes={len(nodes)}",
            f"--nproc-per-node={spec.ntasks_per_node}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}", "--max-restarts=0"]
    command = spec.argv
    if not command[0].endswith(".py"):
        argv.append("--no-python")
    return argv + command


def training_command(spec: TrainSpec, nodes: Sequence[str], *, endpoint: str, run_id: str,
                     env: Mapping[str, str] | None = None) -> list[str]:
    """What each srun task of the training step runs."""
    if spec.launch == "torchrun":
        return torchrun_argv(spec, nodes, endpoint=endpoint, run_id=run_id, env=env)
    return list(spec.argv)


def srun_argv(spec: TrainSpec, nodes: Sequence[str], *, endpoint: str = "MASTER:PORT",
              run_id: str = "RUN") -> tuple[str, ...]:
    """The training step's srun argv, as the door renders it (for logs, dry runs, tests)."""
    return tuple(step_argv(step_request(spec, nodes),
                           training_command(spec, nodes, endpoint=endpoint, run_id=run_id)))


# ------------------------------------------------------------------ environment

def training_env(spec: TrainSpec, *, base: Mapping[str, str], ckpt_dir: str,
                 resume_from: str | None, skip_steps: str, metrics_file: str,
                 master_addr: str, port: int, run_id: str, attempt: int,
                 resume_step: int | None = None) -> dict[str, str]:
    """The training processes' environment: the job's, train.yaml's ``env``, then the
    contract of :mod:`slurm_acme.contracts` (documented in docs/training.md)."""
    spike = spec.fault_tolerance.loss_spike
    env = dict(base)
    env.update(spec.env)
    env.update({
        c.ENV_RUN_ID: run_id,
        c.ENV_ATTEMPT: str(attempt),
        c.ENV_CKPT_DIR: ckpt_dir,
        c.ENV_CKPT_INTERVAL: str(spec.checkpoint.interval),
        c.ENV_CKPT_KEEP: str(spec.checkpoint.keep),
        c.ENV_CKPT_ASYNC: "1" if spec.checkpoint.async_ else "0",
        c.ENV_SKIP_STEPS: skip_steps,
        c.ENV_METRICS_FILE: metrics_file,
        c.ENV_SPIKE_GUARD: "1" if spike.enabled else "0",
        c.ENV_SPIKE_RATIO: str(spike.ratio),
        c.ENV_SPIKE_WARMUP: str(spike.warmup),
        c.ENV_MASTER_ADDR: master_addr,
        c.ENV_MASTER_PORT: str(port),
        "PYTHONUNBUFFERED": "1",
    })
    for name in (c.ENV_RESUME_FROM, c.ENV_RESUME_STEP):
        env.pop(name, None)
    if resume_from:
        env[c.ENV_RESUME_FROM] = resume_from
        if resume_step is not None:
            env[c.ENV_RESUME_STEP] = str(resume_step)
    return env
