"""Split a training state into a JSON skeleton and a flat list of tensors, and back.

A checkpoint holds nested dicts/lists of tensors (model, optimizer), numpy
arrays and plain values (RNG states, data position, step). Tensors go into the
host arena as raw bytes; everything else becomes a tagged JSON skeleton, so
loading a checkpoint never unpickles code.

Tags: ``{"T": i}`` tensor i, ``{"N": i, "dtype", "shape"}`` numpy array stored as
tensor i (raw bytes), ``{"D": [[k, v], ...]}`` dict (any scalar keys),
``{"L": [...]}`` list, ``{"U": [...]}`` tuple, ``{"B": base64}`` bytes.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import torch


def flatten(state: Any) -> tuple[Any, list[torch.Tensor]]:
    """Return (skeleton, tensors); the skeleton is JSON-serialisable."""
    tensors: list[torch.Tensor] = []

    def enc(obj: Any, where: str) -> Any:
        if isinstance(obj, torch.Tensor):
            tensors.append(obj.detach())
            return {"T": len(tensors) - 1}
        if isinstance(obj, np.ndarray):
            flat = torch.from_numpy(np.ascontiguousarray(obj).reshape(-1).view(np.uint8))
            tensors.append(flat)
            return {"N": len(tensors) - 1, "dtype": obj.dtype.str, "shape": list(obj.shape)}
        if isinstance(obj, np.generic):
            return enc(obj.item(), where)
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, dict):
            return {"D": [[enc(k, f"{where}.<key>"), enc(v, f"{where}.{k}")]
                          for k, v in obj.items()]}
        if isinstance(obj, list):
            return {"L": [enc(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, tuple):
            return {"U": [enc(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, (bytes, bytearray)):
            return {"B": base64.b64encode(bytes(obj)).decode()}
        raise TypeError(f"cannot checkpoint {type(obj).__name__} at state{where}; use tensors, "
                        "numpy arrays, dicts, lists, tuples, str, int, float, bool, bytes, None")

    return enc(state, ""), tensors


def unflatten(skeleton: Any, tensors: list[torch.Tensor]) -> Any:
    """Inverse of :func:`flatten`."""

    def dec(node: Any) -> Any:
        if not isinstance(node, (dict, list)):
            return node
        if isinstance(node, list):
            raise TypeError("malformed checkpoint skeleton: bare list")
        if "T" in node:
            return tensors[node["T"]]
        if "N" in node:
            raw = tensors[node["N"]].numpy().tobytes()
            return np.frombuffer(raw, dtype=np.dtype(node["dtype"])).reshape(node["shape"]).copy()
        if "D" in node:
            return {_hashable(dec(k)): dec(v) for k, v in node["D"]}
        if "L" in node:
            return [dec(v) for v in node["L"]]
        if "U" in node:
            return tuple(dec(v) for v in node["U"])
        if "B" in node:
            return base64.b64decode(node["B"])
        raise ValueError(f"malformed checkpoint skeleton node {sorted(node)}")

    return dec(skeleton)


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key
