"""The prolog/epilog mark files: the only thing the hooks write.

``<spool>/<node>/marks/<job>.<restart>.start`` and ``... .end``, one JSON object
each (``"v": MARK_VERSION``). The mark's time is its file's mtime (the hooks avoid forking
``date``); a ``ts`` field, when present, wins. The hooks write a mark with one
``write(2)``, so a mark that does not parse yet is waited for a few seconds and
then moved aside to ``marks/bad/`` and reported, never retried forever.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_acme.contracts import MARK_VERSION

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
    """A mark file that is not a mark of :data:`MARK_VERSION`."""


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


#: How long a mark that does not parse may still be in the middle of being written.
GRACE_S = 10.0


def parse_mark(text: str, kind: str, mtime: float | None = None) -> Mark:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadMark(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("v") != MARK_VERSION:
        raise BadMark(f"not a version-{MARK_VERSION} mark")
    try:
        indices, uuids = parse_gpu_list(data.get("gpus"))
        return Mark(kind=kind, job_id=str(data["job_id"]), node=str(data["node"]),
                    ts=float(data["ts"] if data.get("ts") is not None else mtime),  # type: ignore[arg-type]
                    user=data.get("user") or None,
                    gpu_indices=indices, gpu_uuids=uuids,
                    exit_code=exit_code_of(data.get("exit_code")),
                    restart=int(data.get("restart") or 0))
    except (KeyError, TypeError, ValueError) as exc:
        raise BadMark(f"missing or malformed field: {exc}") from None


def pending_marks(folder: Path) -> list[Path]:
    """Mark files waiting: a requeued job's earlier run first, starts before ends."""
    try:
        entries = [e for e in os.scandir(folder) if e.is_file() and e.name.rsplit(".", 1)[-1] in KINDS]
    except FileNotFoundError:
        return []
    entries.sort(key=lambda e: (_restart(e.name), KINDS.index(e.name.rsplit(".", 1)[-1]),
                                e.stat().st_mtime, e.name))
    return [Path(e.path) for e in entries]


def _restart(name: str) -> int:
    parts = name.split(".")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else 0


def read_mark(path: Path) -> Mark:
    mtime = path.stat().st_mtime
    return parse_mark(path.read_text(encoding="utf-8", errors="replace"),
                      path.name.rsplit(".", 1)[-1], mtime)


def age(path: Path, now: float) -> float:
    try:
        return now - path.stat().st_mtime
    except OSError:
        return float("inf")


def set_aside(path: Path) -> Path:
    bad = path.parent / "bad"
    bad.mkdir(exist_ok=True)
    target = bad / path.name
    path.replace(target)
    return target
