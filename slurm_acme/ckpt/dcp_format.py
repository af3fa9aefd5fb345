"""Optional output format: torch.distributed.checkpoint (DCP) for the tensors.

The snapshot and commit protocol are unchanged; only the writer differs. Each
rank's tensors go into DCP under the key ``rank<R>`` (so per-rank state such as
RNG and data position is never de-duplicated across ranks), and its header
(skeleton and tensor layout) into ``rank<R>.header``. Other DCP tools can read
the tensors; our manifest still decides whether the checkpoint is healthy.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from slurm_acme.ckpt.arena import HostArena
from slurm_acme.ckpt.fsio import LocalFS, checksum_file
from slurm_acme.ckpt.manifest import Manifest, ShardRecord
from slurm_acme.ckpt.shardfile import CorruptShard, parse_header

DCP_SUBDIR = "dcp"


def _header_name(rank: int) -> str:
    return f"rank{rank:05d}.header"


def _arena_tensors(arena: HostArena) -> dict[str, torch.Tensor]:
    out = {}
    for i, slot in enumerate(arena.slots):
        dtype = getattr(torch, slot.dtype)
        if slot.nbytes == 0:
            out[f"t{i}"] = torch.empty(slot.shape, dtype=dtype)
        else:
            raw = arena.buffer[slot.offset:slot.offset + slot.nbytes]
            out[f"t{i}"] = raw.view(dtype).view(slot.shape)
    return out


def _owned_files(root: Path, rank: int) -> list[Path]:
    files = sorted((root / DCP_SUBDIR).glob(f"__{rank}_*.distcp"))
    if rank == 0:
        files.append(root / DCP_SUBDIR / ".metadata")
    return files


def save_dcp(step_path: Path, header: bytes, arena: HostArena, rank: int, world_size: int,
             group: object) -> list[ShardRecord]:
    fs = LocalFS()
    written = fs.write_atomic(step_path / _header_name(rank), [header])
    records = [ShardRecord(rank, _header_name(rank), written.bytes, written.checksum)]
    dcp.save({f"rank{rank}": _arena_tensors(arena)},
             storage_writer=dcp.FileSystemWriter(step_path / DCP_SUBDIR, sync_files=True),
             process_group=group, no_dist=world_size == 1)
    for f in _owned_files(step_path, rank):
        w = checksum_file(f)
        records.append(ShardRecord(rank, str(f.relative_to(step_path)), w.bytes, w.checksum))
    return records


def load_dcp(step_path: Path, manifest: Manifest, rank: int) -> tuple[object, list]:
    for shard in manifest.shards:
        if shard.rank == rank or shard.file.endswith(".metadata"):
            w = checksum_file(step_path / shard.file)
            if (w.bytes, w.checksum) != (shard.bytes, shard.checksum):
                raise CorruptShard(f"{step_path / shard.file}: {w.bytes} bytes {w.checksum}, "
                                   f"manifest says {shard.bytes} bytes {shard.checksum}")
    raw = (step_path / _header_name(rank)).read_bytes()
    header, _ = parse_header(raw, step_path / _header_name(rank))
    template = {}
    for i, slot in enumerate(header["tensors"]):
        template[f"t{i}"] = torch.empty(slot["shape"], dtype=getattr(torch, slot["dtype"]))
    state = {f"rank{rank}": template}
    dcp.load(state, storage_reader=dcp.FileSystemReader(step_path / DCP_SUBDIR), no_dist=True)
    tensors = [state[f"rank{rank}"][f"t{i}"] for i in range(len(header["tensors"]))]
    return header["skeleton"], tensors
