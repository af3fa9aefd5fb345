"""Asynchronous checkpointing and the loss-spike guard (paper s6.1): the opt-in,
deeper integration a training script can use (see docs/training.md).

Importing this package is cheap and torch-free: the supervisor imports
``slurm_acme.ckpt.manifest`` to find the newest healthy checkpoint. The names
below load on first attribute access.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "AsyncCheckpointer": "slurm_acme.ckpt.checkpointer",
    "SaveReport": "slurm_acme.ckpt.checkpointer",
    "PersistResult": "slurm_acme.ckpt.checkpointer",
    "Resumed": "slurm_acme.ckpt.checkpointer",
    "CheckpointMismatch": "slurm_acme.ckpt.checkpointer",
    "LossSpikeGuard": "slurm_acme.ckpt.guard",
    "MetricsWriter": "slurm_acme.ckpt.metrics",
    "init_distributed": "slurm_acme.ckpt.collective",
    "install_checkpoint_signal": "slurm_acme.ckpt.signals",
    "CheckpointRequest": "slurm_acme.ckpt.signals",
    "skip_steps_from_env": "slurm_acme.ckpt.skips",
    "CheckpointRef": "slurm_acme.ckpt.manifest",
    "latest_healthy": "slurm_acme.ckpt.manifest",
    "list_checkpoints": "slurm_acme.ckpt.manifest",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'slurm_acme.ckpt' has no attribute {name!r}")
