"""Asynchronous checkpointing and the loss-spike guard (paper s6.1).

Importing this package is cheap and torch-free: the supervisor imports
``slurm_acme.ckpt.manifest`` to find the newest healthy checkpoint. The torch
parts load on first attribute access.
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
