"""A private host copy of a training state, in the structure DCP saves.

:func:`stage` walks the state the way ``torch.distributed.checkpoint`` does
(``Stateful`` values at the top turned into their ``state_dict()``, dicts by
key, lists by index), copies every tensor into the :class:`HostArena` in one
batch and copies every other value, so training may change the live state
while the copy is written in the background.

Two things DCP's string keys lose are recorded in :class:`DictShapes`, so a
state rebuilt from the checkpoint alone (no template) is the one that was saved:
integer dict keys (an optimizer's ``state`` is keyed by parameter index) and
empty dicts (which DCP does not store at all).

Values other than tensors are limited to what loads without unpickling code
(``weights_only``): None, bool, int, float, complex, str, bytes, numpy arrays
and scalars, torch dtypes and sizes, and tuples/lists/dicts of those.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from slurm_acme.ckpt.arena import HostArena

PathT = tuple[str | int, ...]
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.Size,
          np.generic)


@dataclass
class DictShapes:
    """Dicts whose DCP form differs from the original: int keys, or empty."""

    int_keys: dict[PathT, list[int]] = field(default_factory=dict)
    empty: list[PathT] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"int_keys": [[list(p), keys] for p, keys in self.int_keys.items()],
                "empty": [list(p) for p in self.empty]}

    @classmethod
    def from_json(cls, data: Mapping | None) -> DictShapes:
        data = data or {}
        return cls({tuple(p): list(keys) for p, keys in data.get("int_keys", [])},
                   [tuple(p) for p in data.get("empty", [])])

    def merge(self, other: DictShapes) -> None:
        self.int_keys.update(other.int_keys)
        self.empty.extend(p for p in other.empty if p not in self.empty)


@dataclass
class Staged:
    """A staged state: the structure to hand to ``dcp.save`` and what DCP would lose."""

    state: dict
    shapes: DictShapes
    nbytes: int


def _is_dtensor(obj: Any) -> bool:
    return type(obj).__name__ == "DTensor" and hasattr(obj, "_spec")


def _check_plain(obj: Any, where: str) -> None:
    """Reject (at save time, naming the path) a value resume could not load safely."""
    if isinstance(obj, _PLAIN):
        return
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError(f"cannot checkpoint a numpy object array at state{where}")
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_plain(v, f"{where}[{i}]")
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_plain(k, f"{where}.<key>")
            _check_plain(v, f"{where}.{k}")
        return
    if isinstance(obj, torch.Tensor):
        return
    raise TypeError(f"cannot checkpoint {type(obj).__name__} at state{where}: use tensors, "
                    "numpy arrays, dicts, lists, tuples, str, int, float, bool, bytes, None")


def stage(state: Mapping[str, Any], arena: HostArena) -> Staged:
    """Copy `state` into `arena` (tensors) and private copies (everything else)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"the checkpoint state must be a dict, got {type(state).__name__}")
    sources: list[torch.Tensor] = []
    fixups: list[tuple[Any, Any, int, Any]] = []  # (container, key, source index, dtensor)
    shapes = DictShapes()

    def walk(obj: Any, path: PathT, into: Any, key: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            if type(obj) is not torch.Tensor and type(obj) is not torch.nn.Parameter:
                if not _is_dtensor(obj):
                    raise TypeError(f"cannot checkpoint a {type(obj).__name__} at "
                                    f"{_dotted(path)}: use plain tensors or DTensors "
                                    "(FSDP2), e.g. a full or DTensor state dict")
                fixups.append((into, key, len(sources), obj))
                sources.append(obj._local_tensor)  # type: ignore[attr-defined]
            elif obj.layout is not torch.strided:
                raise TypeError(f"cannot checkpoint a {obj.layout} tensor at "
                                f"{_dotted(path)}: DCP saves dense tensors")
            else:
                fixups.append((into, key, len(sources), None))
                sources.append(obj)
            return None
        if isinstance(obj, (dict, Mapping)):
            out: dict = {}
            ints = [k for k in obj if type(k) is int]
            if ints:
                _check_keys(obj, path)
                shapes.int_keys[path] = ints
            elif not obj:
                shapes.empty.append(path)
            for k, v in obj.items():
                if type(k) is not str and type(k) is not int:
                    raise TypeError(f"cannot checkpoint key {k!r} at {_dotted(path)}: dict keys "
                                    "must be str or int")
                out[k] = walk(v, (*path, str(k)), out, k)
            return out
        if isinstance(obj, list) and any(isinstance(v, (torch.Tensor, Mapping, list))
                                         for v in obj):
            items: list = [None] * len(obj)
            for i, v in enumerate(obj):
                items[i] = walk(v, (*path, i), items, i)
            return items
        _check_plain(obj, _dotted(path))
        return copy.deepcopy(obj)

    root: dict = {}
    for k, v in state.items():
        if hasattr(v, "state_dict") and hasattr(v, "load_state_dict") and not isinstance(
                v, (torch.Tensor, Mapping)):
            v = v.state_dict()  # a Stateful (module, optimizer, ...), as dcp.save does
        root[k] = walk(v, (str(k),), root, k)
    copies = arena.snapshot(sources)
    for into, key, i, dtensor in fixups:
        into[key] = copies[i] if dtensor is None else _like_dtensor(dtensor, copies[i])
    return Staged(root, shapes, arena.size)


def _like_dtensor(original: Any, local: torch.Tensor) -> Any:
    """A DTensor with `original`'s placement whose local shard is the host copy."""
    return type(original)(local, original._spec, requires_grad=False)


def _check_keys(obj: Mapping, path: PathT) -> None:
    seen: dict[str, Any] = {}
    for k in obj:
        if str(k) in seen:
            raise TypeError(f"keys {seen[str(k)]!r} and {k!r} at {_dotted(path)} are the same "
                            "key in a DCP checkpoint")
        seen[str(k)] = k


def _dotted(path: PathT) -> str:
    return ".".join(str(p) for p in path) or "<root>"


def restore_dicts(state: dict, shapes: DictShapes) -> dict:
    """Undo what DCP's string keys did to `state` (loaded without a template), in place."""
    for path in sorted(shapes.empty, key=len):
        parent = _find(state, path[:-1], create=True)
        if isinstance(parent, dict):
            parent.setdefault(path[-1], {})
    for path, ints in sorted(shapes.int_keys.items(), key=lambda kv: -len(kv[0])):
        node = _find(state, path, create=False)
        if isinstance(node, dict):
            for k in ints:
                if str(k) in node:
                    node[k] = node.pop(str(k))
    return state


def _find(state: Any, path: PathT, create: bool) -> Any:
    node = state
    for p in path:
        if isinstance(node, dict):
            if p not in node:
                if not create:
                    return None
                node[p] = {}
            node = node[p]
        elif isinstance(node, list) and isinstance(p, int) and p < len(node):
            node = node[p]
        else:
            return None
    return node
