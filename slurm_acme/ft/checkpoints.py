"""Every checkpoint a run has on disk, whoever wrote it.

Three kinds live in ``checkpoint.dir``:

* ``acme``: slurm-acme's own (``step_NNNNNNNN/`` with a ``manifest.json``),
  healthy when every shard the manifest lists is present at its size;
* ``dcp``: a ``torch.distributed.checkpoint`` folder, recognised by its
  ``.metadata`` file (DCP writes it last, once every rank's shards are down);
* ``torch``: the trainer's own ``torch.save`` files or folders, matched by
  ``checkpoint.glob``; a file is complete when its zip directory (torch's
  format since 1.6, written last) reads, a folder when its zip files do.

The step is the manifest's, else the last number in the name (``step-100``,
``checkpoint-500``, ``epoch=1-step=500.ckpt``, ``iter_0000100``); a name without
a number is not a checkpoint the supervisor can order, so it is left out.
Nothing here deletes anything: a user's checkpoints are theirs. Torch-free.
"""

from __future__ import annotations

import fnmatch
import os
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_acme.ckpt import manifest

#: Kinds, best first when two checkpoints hold the same step.
KINDS = ("acme", "dcp", "torch")
DCP_METADATA = ".metadata"
_NUMBER = re.compile(r"\d+")
#: Folders bigger than this are not walked for their size (status stays quick).
_MAX_WALK = 10_000


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint on disk that a trainer can resume from."""

    step: int
    path: str
    kind: str = "acme"
    size: float | None = None
    checksum: str | None = None
    #: When it was written (manifest time, else the file's mtime); rollbacks compare it.
    created_ts: float = 0.0


def step_in_name(name: str) -> int | None:
    """The last number in a file or folder name (extension ignored), or None."""
    stem = name
    for ext in (".pt", ".pth", ".ckpt", ".bin", ".tar", ".safetensors"):
        if stem.endswith(ext):
            stem = stem[: -len(ext)]
            break
    numbers = _NUMBER.findall(stem)
    return int(numbers[-1]) if numbers else None


def _tree_size(path: Path) -> float | None:
    total, seen = 0, 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            seen += 1
            if seen > _MAX_WALK:
                return None
            try:
                total += (Path(root) / name).stat().st_size
            except OSError:
                continue
    return float(total)


def _looks_zip(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def _complete_file(path: Path) -> bool:
    """A torch.save file that was written to the end (zip directory readable)."""
    try:
        if path.stat().st_size == 0:
            return False
    except OSError:
        return False
    if _looks_zip(path):
        return zipfile.is_zipfile(path)
    return True  # torch's legacy (pre-1.6) pickle format: nothing cheap to check


def _complete_folder(path: Path) -> bool:
    entries = [p for p in path.rglob("*") if p.is_file()]
    if any(p.suffix == ".distcp" for p in entries):
        return False  # DCP shards without ``.metadata``: a save that did not finish
    return bool(entries) and all(_complete_file(p) for p in entries if _looks_zip(p))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _acme(path: Path) -> Checkpoint | None:
    record = manifest.read_manifest(path)
    if record is None or manifest.files_present(path, record) is not None:
        return None
    return Checkpoint(step=record.step, path=str(path), kind="acme", size=float(record.bytes),
                      checksum=record.checksum, created_ts=record.created_ts)


def _dcp(path: Path) -> Checkpoint | None:
    step = step_in_name(path.name)
    if step is None:
        return None
    return Checkpoint(step=step, path=str(path), kind="dcp", size=_tree_size(path),
                      created_ts=_mtime(path / DCP_METADATA))


def _torch(path: Path) -> Checkpoint | None:
    step = step_in_name(path.name)
    if step is None:
        return None
    if path.is_dir():
        if not _complete_folder(path):
            return None
        return Checkpoint(step=step, path=str(path), kind="torch", size=_tree_size(path),
                          created_ts=_mtime(path))
    if not _complete_file(path):
        return None
    return Checkpoint(step=step, path=str(path), kind="torch", size=float(path.stat().st_size),
                      created_ts=_mtime(path))


def _classify(path: Path, globs: Sequence[str]) -> Checkpoint | None:
    if path.name.startswith("."):
        return None
    if path.is_dir() and (path / manifest.MANIFEST_NAME).exists():
        return _acme(path)
    if manifest.step_of(path) is not None:
        return None  # slurm-acme's own save without a manifest: not committed
    if path.is_dir() and (path / DCP_METADATA).is_file():
        return _dcp(path)
    if any(fnmatch.fnmatch(path.name, g) for g in globs):
        return _torch(path)
    return None


def find_checkpoints(ckpt_dir: str | os.PathLike[str], globs: Sequence[str] = ()) -> list[Checkpoint]:
    """Every complete checkpoint in ``ckpt_dir`` (and DCP folders one level down), oldest
    step first; for one step, the best kind only."""
    root = Path(ckpt_dir)
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    found: list[Checkpoint] = []
    for entry in entries:
        ck = _classify(entry, globs)
        if ck is None and entry.is_dir() and not entry.name.startswith("."):
            found += [c for c in (_dcp(sub) for sub in sorted(entry.iterdir())
                                  if sub.is_dir() and (sub / DCP_METADATA).is_file())
                      if c is not None]
        elif ck is not None:
            found.append(ck)
    best: dict[int, Checkpoint] = {}
    for ck in found:
        old = best.get(ck.step)
        if old is None or KINDS.index(ck.kind) < KINDS.index(old.kind):
            best[ck.step] = ck
    return [best[s] for s in sorted(best)]
