"""Write and read checkpoints as standard ``torch.distributed.checkpoint`` (DCP) directories.

A step directory *is* a DCP checkpoint: ``.metadata`` plus ``__<rank>_<n>.distcp``
files, written by DCP's own ``FileSystemWriter`` and planner, so ``dcp.load``,
resharding to another world size and ``format_utils.dcp_to_torch_save`` work on it
without slurm-acme. Beside it, ``manifest.json`` (see :mod:`manifest`) records each
file's size and checksum and marks the checkpoint committed.

* The job's state is saved under its own keys (``dcp.load({"model": sd})`` finds
  ``model.0.weight``). DCP's planner writes a value that several ranks hold (DDP
  replicas) once, spreading such values over the ranks by size.
* Per-rank state (RNG, data position) goes under ``rank_state.<rank>``, so it is
  never de-duplicated away; at another world size a rank without an entry gets None.
* File I/O goes through :class:`LocalFS` (fsync on close, atomic rename of
  ``.metadata``), the checkpointer's one door to the filesystem.
* Reading verifies each file's checksum against the manifest before DCP parses it,
  and unpickles non-tensor values with ``weights_only=True`` (no code runs).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import warnings
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

from slurm_acme.ckpt.fsio import LocalFS, checksum_file
from slurm_acme.ckpt.manifest import ShardRecord
from slurm_acme.ckpt.shardfile import CorruptShard
from slurm_acme.ckpt.snapshot import DictShapes, restore_dicts

RANK_STATE_KEY = "rank_state"
METADATA_FILE = ".metadata"


# ---- the filesystem door ---------------------------------------------------------------

class _RoutedFileSystem(FileSystem):
    """DCP's filesystem calls, routed through LocalFS (durability, and tests' faults)."""

    def __init__(self, fs: LocalFS) -> None:
        self.local = fs

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str
                      ) -> Generator[io.IOBase, None, None]:
        if "w" not in mode:
            with open(path, mode) as stream:
                yield stream  # type: ignore[misc]
            return
        with self.local.open_write(Path(path)) as stream:
            yield stream

    def rename(self, path: str | os.PathLike, new_path: str | os.PathLike) -> None:
        self.local.rename(Path(path), Path(new_path))


#: DCP warnings that describe what this module intends: one process when the job has
#: one rank, and overwriting a step directory that an earlier attempt left unfinished.
_EXPECTED_WARNINGS = ("torch.distributed is disabled, unavailable or uninitialized",
                      "Detected an existing checkpoint in")


def _quiet_expected_warnings() -> None:
    for text in _EXPECTED_WARNINGS:
        if not any(f[1] is not None and f[1].pattern == text for f in warnings.filters):
            warnings.filterwarnings("ignore", message=text)


def _writer(step_path: Path, fs: LocalFS) -> dcp.FileSystemWriter:
    # sync_files=False: LocalFS's stream fsyncs on close, through the one door.
    writer = dcp.FileSystemWriter(step_path, single_file_per_rank=True, sync_files=False,
                                  overwrite=True)
    writer.fs = _RoutedFileSystem(fs)
    return writer


def written_files(metadata: Metadata, rank: int) -> list[str]:
    """The files of a DCP checkpoint that `rank` wrote (rank 0 also wrote ``.metadata``)."""
    files = {info.relative_path for info in (metadata.storage_data or {}).values()}
    mine = sorted(f for f in files if f.startswith(f"__{rank}_"))
    return [*mine, METADATA_FILE] if rank == 0 else mine


def save(step_path: Path, state: dict, *, rank: int, world_size: int, group: Any,
         fs: LocalFS) -> list[ShardRecord]:
    """``dcp.save`` a staged state; the size and checksum of each file this rank wrote."""
    fs.makedirs(step_path)
    _quiet_expected_warnings()
    metadata = dcp.save(state, storage_writer=_writer(step_path, fs), process_group=group,
                        no_dist=world_size == 1)
    fs.fsync_dir(step_path)
    records = []
    for name in written_files(metadata, rank):
        w = checksum_file(step_path / name)
        records.append(ShardRecord(rank, name, w.bytes, w.checksum))
    return records


def with_rank_state(state: dict, rank: int, rank_state: Any) -> dict:
    if RANK_STATE_KEY in state:
        raise ValueError(f"the checkpoint state has a top-level key {RANK_STATE_KEY!r}, which "
                         "holds per-rank state; pass that as save(..., rank_state=...)")
    if rank_state is None:
        return dict(state)
    return {**state, RANK_STATE_KEY: {str(rank): rank_state}}


# ---- reading ---------------------------------------------------------------------------

def _numpy_globals() -> list:
    """What a numpy array or scalar needs to unpickle: constructors, never arbitrary code."""
    reconstruct = np.empty(0).__reduce__()[0]
    scalar = np.float64(0).__reduce__()[0]
    dtype_classes = [type(np.dtype(c)) for c in "?bBhHiIlLqQefdgFDGSUV"]
    return [reconstruct, scalar, np.ndarray, np.dtype, *dtype_classes]


class _VerifyingReader(dcp.FileSystemReader):
    """Checks each file against the manifest's size and checksum before DCP reads it."""

    def __init__(self, step_path: Path, expected: dict[str, tuple[int, str]]) -> None:
        super().__init__(step_path)
        self.step_path = step_path
        self.expected = expected
        self.verified: set[str] = set()
        self.corrupt: CorruptShard | None = None

    def verify(self, name: str) -> None:
        if name in self.verified:
            return
        path = self.step_path / name
        if name not in self.expected:
            self.corrupt = CorruptShard(f"{path}: not listed in the manifest")
            raise self.corrupt
        try:
            w = checksum_file(path)
        except OSError as exc:
            self.corrupt = CorruptShard(f"{path}: {exc}")
            raise self.corrupt from exc
        if (w.bytes, w.checksum) != self.expected[name]:
            size, crc = self.expected[name]
            self.corrupt = CorruptShard(f"{path}: {w.bytes} bytes {w.checksum}, manifest says "
                                        f"{size} bytes {crc}")
            raise self.corrupt
        self.verified.add(name)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        self.verify(METADATA_FILE)
        return super().read_metadata(*args, **kwargs)

    def read_data(self, plan: Any, planner: Any) -> Any:
        for name in sorted({self.storage_data[item.storage_index].relative_path
                            for item in plan.items}):
            self.verify(name)
        return super().read_data(plan, planner)


class _Planner(DefaultLoadPlanner):
    """DCP's default load planner, plus: entries missing from the template are built
    from the checkpoint's metadata (all of them when there is no template; this rank's
    ``rank_state`` otherwise), other ranks' ``rank_state`` is left out, and values
    are unpickled with ``weights_only=True``."""

    def __init__(self, rank: int, fill_all: bool) -> None:
        super().__init__()
        self.rank, self.fill_all = rank, fill_all

    def _wanted(self, fqn: str, path: tuple) -> bool:
        if path and path[0] == RANK_STATE_KEY:
            return len(path) > 1 and str(path[1]) == str(self.rank)
        return self.fill_all

    def set_up_planner(self, state_dict: Any, metadata: Metadata | None = None,
                       is_coordinator: bool = False) -> None:
        assert metadata is not None
        mappings = metadata.planner_data or {}
        for fqn, md in metadata.state_dict_metadata.items():
            path = tuple(mappings.get(fqn, (fqn,)))
            if not self._wanted(fqn, path):
                continue
            value: Any = md
            if isinstance(md, TensorStorageMetadata):
                value = torch.empty(md.size, dtype=md.properties.dtype)
            _set(state_dict, path, value)
        super().set_up_planner(state_dict, metadata, is_coordinator)

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        with torch.serialization.safe_globals(_numpy_globals()):
            obj = torch.load(value, weights_only=True)
        _set(self.original_state_dict, tuple(self.mappings[read_item.dest_index.fqn]), obj)


def _set(root: dict, path: tuple, value: Any) -> None:
    """DCP's ``set_element``, except that a path element matches an existing int key
    by its string (DCP paths spell every dict key as a string)."""
    node: Any = root
    for here, nxt in itertools.pairwise(path):
        fresh: Any = [] if isinstance(nxt, int) else {}
        if isinstance(node, list):
            while len(node) <= here:
                node.append(None)
            if node[here] is None:
                node[here] = fresh
            node = node[here]
        else:
            node = node.setdefault(_key_in(node, here), fresh)
    last = path[-1]
    if isinstance(node, list):
        while len(node) <= last:
            node.append(None)
        node[last] = value
    else:
        node[_key_in(node, last)] = value


def _key_in(node: dict, key: Any) -> Any:
    if key in node or not isinstance(key, str) or not node or not isinstance(next(iter(node)), int):
        return key  # int-keyed dicts are only ever the template's own (e.g. optimizer state)
    return next((k for k in node if isinstance(k, int) and str(k) == key), key)


def load(step_path: Path, shards: Iterable[ShardRecord], rank: int,
         template: dict | None = None, shapes: DictShapes | None = None) -> tuple[dict, Any]:
    """Load a verified DCP checkpoint: (state, this rank's rank_state or None).

    With `template`, tensors are loaded in place into it (DCP's way, which also
    reshards DTensors to this job's placement); without one, the state is rebuilt
    from the checkpoint, tensors on the CPU. Raises CorruptShard for a file that does
    not match the manifest; other errors mean the template does not fit the checkpoint.
    """
    expected = {s.file: (s.bytes, s.checksum) for s in shards}
    reader = _VerifyingReader(step_path, expected)
    planner = _Planner(rank, template is None)
    _quiet_expected_warnings()
    try:
        dcp.load({} if template is None else template, storage_reader=reader, planner=planner,
                 no_dist=True)
    except BaseException:
        if reader.corrupt is not None:
            raise reader.corrupt from None
        raise
    # dcp.load copies back only the keys the caller passed; the rest is the planner's.
    loaded = planner.original_state_dict
    if shapes is not None:  # what DCP's string keys lost, where this call built the values
        restore_dicts(loaded if template is None else
                      {RANK_STATE_KEY: loaded.get(RANK_STATE_KEY, {})}, shapes)
    rank_state = loaded.pop(RANK_STATE_KEY, {}).get(str(rank))
    return (loaded if template is None else template), rank_state
