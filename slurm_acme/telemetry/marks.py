"""The prolog/epilog mark files: the only thing the hooks write.

``<spool>/<node>/marks/<job>.<restart>.start`` and ``... .end``, one JSON object
each (``"v": 1``). The hooks write them atomically (temp file + rename), so a
mark that exists is complete; one that does not parse is moved aside to
``marks/bad/`` and reported, never retried forever.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("start", "end")


@dataclass(frozen=True)
class Mark:
    kind: str
    job_id: str
    node: str
    ts: float
    user: str | None = None
    gpu_indices: tuple[int, ...] | None = None
    gpu_uuids: tuple[str, ...] = ()
    exit_code: int | None = None
    restart: int = 0


class BadMark(ValueError):
    """A mark file that is not a version-1 mark."""


def parse_gpu_list(text: str | None) -> tuple[tuple[int, ...] | None, tuple[str, ...]]:
    """Indices and UUIDs from SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES style lists.

    ``"0,1,2"`` gives indices; ``"GPU-1a2b..."`` entries give UUIDs; an absent
    list gives ``None`` (unknown), which differs from an empty one (no GPUs).
    """
    if text is None:
        return None, ()
    indices, uuids = [], []
    for token in text.replace(" ", "").split(","):
        if token.isdigit():
            indices.append(int(token))
        elif token.startswith(("GPU-", "MIG-")):
            uuids.append(token)
    return tuple(indices), tuple(uuids)


def exit_code_of(raw: Any) -> int | None:
    """``SLURM_JOB_EXIT_CODE2`` is ``exit:signal``; a signal reports as 128+signal."""
    if raw in (None, ""):
        return None
    code, _, signal = str(raw).partition(":")
    try:
        if signal and int(signal):
            return 128 + int(signal)
        return int(code)
    except ValueError:
        return None


def parse_mark(text: str, kind: str) -> Mark:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadMark(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("v") != 1:
        raise BadMark("not a version-1 mark")
    try:
        indices, uuids = parse_gpu_list(data.get("gpus"))
        return Mark(kind=kind, job_id=str(data["job_id"]), node=str(data["node"]),
                    ts=float(data["ts"]), user=data.get("user") or None,
                    gpu_indices=indices, gpu_uuids=uuids,
                    exit_code=exit_code_of(data.get("exit_code")),
                    restart=int(data.get("restart") or 0))
    except (KeyError, TypeError, ValueError) as exc:
        raise BadMark(f"missing or malformed field: {exc}") from None


def pending_marks(folder: Path) -> list[Path]:
    """Mark files waiting, starts before ends, each kind in time order."""
    try:
        entries = [e for e in os.scandir(folder) if e.is_file() and e.name.rsplit(".", 1)[-1] in KINDS]
    except FileNotFoundError:
        return []
    entries.sort(key=lambda e: (KINDS.index(e.name.rsplit(".", 1)[-1]), e.stat().st_mtime, e.name))
    return [Path(e.path) for e in entries]


def read_mark(path: Path) -> Mark:
    return parse_mark(path.read_text(encoding="utf-8", errors="replace"), path.name.rsplit(".", 1)[-1])


def set_aside(path: Path) -> Path:
    bad = path.parent / "bad"
    bad.mkdir(exist_ok=True)
    target = bad / path.name
    path.replace(target)
    return target
