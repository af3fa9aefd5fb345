"""How the supervisor starts the training command: the srun argv and its environment.

srun is the step launcher of the job's own allocation; like every Slurm
command it is spelled and started by the door, :mod:`slurm_acme.slurm`
(:class:`StepRequest`, :func:`step_argv`, :func:`start_step`). This module only
decides the step's shape. The argv is a list, never a shell string.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_acme import contracts as c
from slurm_acme.ft.spec import TrainSpec
from slurm_acme.slurm import Slurm, StepRequest, step_argv


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    nodes: tuple[str, ...]
    ntasks_per_node: int

    def node_of_rank(self, rank: int | None) -> str | None:
        """srun's default block distribution: ranks fill a node before the next."""
        if rank is None or not self.nodes:
            return None
        index = rank // self.ntasks_per_node
        return self.nodes[index] if 0 <= index < len(self.nodes) else None


def master_port(job_id: str, attempt: int) -> int:
    """A port per (job, attempt), so concurrent worlds on one host never collide."""
    digits = int("".join(ch for ch in job_id if ch.isdigit()) or "0")
    return 21000 + (digits * 131 + attempt * 17) % 20000


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


def step_request(spec: TrainSpec, nodes: Sequence[str]) -> StepRequest:
    """The training step's shape: every task on ``nodes``, labelled, unbuffered, and
    killed as a whole when one task fails (so the supervisor sees the failure)."""
    return StepRequest(nodes=len(nodes), ntasks_per_node=spec.ntasks_per_node,
                       ntasks=len(nodes) * spec.ntasks_per_node, label=True,
                       kill_on_bad_exit=True, export="ALL", unbuffered=True)


def srun_argv(spec: TrainSpec, nodes: Sequence[str]) -> tuple[str, ...]:
    """The training step's srun argv, as the door renders it (for logs and tests)."""
    return tuple(step_argv(step_request(spec, nodes), spec.argv))


def training_env(spec: TrainSpec, *, base: Mapping[str, str], ckpt_dir: str,
                 resume_from: str | None, skip_steps: str, metrics_file: str,
                 master_addr: str, port: int, run_id: str, attempt: int) -> dict[str, str]:
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
    if resume_from:
        env[c.ENV_RESUME_FROM] = resume_from
    else:
        env.pop(c.ENV_RESUME_FROM, None)
    return env
