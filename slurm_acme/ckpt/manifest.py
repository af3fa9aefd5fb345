"""The on-disk manifest of a checkpoint: what makes a step directory "committed".

Torch-free on purpose: the supervisor calls :func:`latest_healthy` between
attempts to decide where to roll back to, and must not pay for importing torch.

Layout under a checkpoint directory::

    <ckpt_dir>/step_00000020/.metadata          the step directory is a DCP checkpoint:
    <ckpt_dir>/step_00000020/__0_0.distcp       DCP's metadata and each rank's data file
    <ckpt_dir>/step_00000020/manifest.json      written last, atomically, by rank 0

A step directory without a readable ``manifest.json`` is partial (a save that
crashed or is still running) and is never offered for resume, even when DCP's
``.metadata`` is there. A committed one is healthy when every file the manifest
lists is present at its recorded size (:func:`files_present`); ``resume()``
also checks each file's crc32 before loading it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
#: 2: the step directory is a DCP checkpoint. 1: the earlier layouts (see :mod:`legacy`).
MANIFEST_VERSION = 2
READABLE_VERSIONS = (1, 2)
_STEP_DIR = re.compile(r"^step_(\d{8,})$")


@dataclass(frozen=True)
class CheckpointRef:
    """A committed checkpoint: its step directory, total bytes and combined checksum."""

    step: int
    path: str
    bytes: int
    checksum: str
    created_ts: float


@dataclass(frozen=True)
class ShardRecord:
    """One file of a checkpoint (relative to the step directory) and its checksum."""

    rank: int
    file: str
    bytes: int
    checksum: str


@dataclass(frozen=True)
class Manifest:
    """Everything needed to verify a checkpoint without opening its tensors."""

    step: int
    format: str
    world_size: int
    created_ts: float
    shards: tuple[ShardRecord, ...]
    extra: dict = field(default_factory=dict)
    version: int = MANIFEST_VERSION

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    @property
    def checksum(self) -> str:
        """A checksum of the shard checksums, stable across rank order."""
        import zlib

        joined = "|".join(f"{s.rank}:{s.file}:{s.checksum}" for s in sorted(
            self.shards, key=lambda s: (s.rank, s.file)))
        return f"crc32:{zlib.crc32(joined.encode()):08x}"

    def to_json(self) -> str:
        data = asdict(self)
        data["bytes"] = self.bytes
        data["checksum"] = self.checksum
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        if data.get("version") not in READABLE_VERSIONS:
            raise ValueError(f"unsupported manifest version {data.get('version')!r}")
        shards = tuple(ShardRecord(**s) for s in data["shards"])
        return cls(step=int(data["step"]), format=str(data["format"]),
                   world_size=int(data["world_size"]), created_ts=float(data["created_ts"]),
                   shards=shards, extra=dict(data.get("extra") or {}),
                   version=int(data["version"]))


def step_dir_name(step: int) -> str:
    if step < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    return f"step_{step:08d}"


def step_of(path: str | os.PathLike) -> int | None:
    """The step encoded in a step directory's name, or None if it is not one."""
    m = _STEP_DIR.match(Path(path).name)
    return int(m.group(1)) if m else None


def step_dirs(ckpt_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """All step directories (committed or not), oldest first."""
    root = Path(ckpt_dir)
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        step = step_of(entry)
        if step is not None and entry.is_dir():
            found.append((step, entry))
    return sorted(found)


def read_manifest(step_path: str | os.PathLike) -> Manifest | None:
    """The manifest of a step directory, or None when it is absent or unreadable."""
    path = Path(step_path) / MANIFEST_NAME
    try:
        return Manifest.from_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable checkpoint manifest %s: %s", path, exc)
        return None


def _ref(step_path: Path, manifest: Manifest) -> CheckpointRef:
    return CheckpointRef(step=manifest.step, path=str(step_path), bytes=manifest.bytes,
                         checksum=manifest.checksum, created_ts=manifest.created_ts)


def files_present(step_path: str | os.PathLike, manifest: Manifest) -> str | None:
    """Cheap check (stat only): None if every shard exists with its recorded size,
    else a reason."""
    for shard in manifest.shards:
        p = Path(step_path) / shard.file
        try:
            size = p.stat().st_size
        except OSError:
            return f"{p} is missing"
        if size != shard.bytes:
            return f"{p} has {size} bytes, manifest says {shard.bytes}"
    return None


def list_checkpoints(ckpt_dir: str | os.PathLike) -> list[CheckpointRef]:
    """Committed checkpoints (a readable manifest), oldest first. Reads JSON only."""
    refs = []
    for _, path in step_dirs(ckpt_dir):
        manifest = read_manifest(path)
        if manifest is not None:
            refs.append(_ref(path, manifest))
    return refs


def latest_healthy(ckpt_dir: str | os.PathLike, max_step: int | None = None
                   ) -> CheckpointRef | None:
    """The newest committed checkpoint whose shard files are all present at their
    recorded sizes (stat, no checksum); optionally no newer than `max_step`.

    Full checksum verification happens in ``AsyncCheckpointer.resume()``, which
    also falls back past a checkpoint that fails it.
    """
    for _, path in reversed(step_dirs(ckpt_dir)):
        manifest = read_manifest(path)
        if manifest is None or (max_step is not None and manifest.step > max_step):
            continue
        problem = files_present(path, manifest)
        if problem is None:
            return _ref(path, manifest)
        log.warning("skipping checkpoint %s: %s", path, problem)
    return None
