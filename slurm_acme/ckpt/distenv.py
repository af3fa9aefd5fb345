"""Rank and world size of this training process, from torchrun or srun variables.

torchrun sets RANK/WORLD_SIZE/LOCAL_RANK; ``srun`` sets SLURM_PROCID/SLURM_NTASKS/
SLURM_LOCALID. Torch-free, so the supervisor and tests can use it too.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job (rank, world size, rank on its node), read
    from torchrun's or Slurm's environment, so the checkpointer knows which
    rank writes what without a process group."""

    rank: int
    world_size: int
    local_rank: int

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _int(env: Mapping[str, str], *names: str, default: int) -> int:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError as exc:
                raise ValueError(f"{name}={value!r} is not an integer") from exc
    return default


def dist_env(env: Mapping[str, str] | None = None) -> DistEnv:
    """torchrun's variables win over Slurm's (torchrun may itself run under srun)."""
    env = os.environ if env is None else env
    if env.get("RANK") and env.get("WORLD_SIZE"):
        return DistEnv(_int(env, "RANK", default=0), _int(env, "WORLD_SIZE", default=1),
                       _int(env, "LOCAL_RANK", default=0))
    return DistEnv(_int(env, "SLURM_PROCID", default=0), _int(env, "SLURM_NTASKS", default=1),
                   _int(env, "SLURM_LOCALID", default=0))


def node_name(env: Mapping[str, str] | None = None) -> str:
    """The Slurm node name when running in a job step, else the hostname."""
    env = os.environ if env is None else env
    return env.get("SLURMD_NODENAME") or socket.gethostname()
