"""Reading checkpoints of the earlier on-disk layouts (manifest version 1), so a run
that started under them still resumes. Nothing writes these layouts any more.

* ``acme``: one ``rank<R>.acme`` shard file per rank (:mod:`shardfile`, :mod:`tree`);
* ``dcp`` v1: ``dcp/`` holding each rank's tensors under ``rank<R>.t<i>``, beside a
  ``rank<R>.header`` with the state's skeleton.

Both hold one full copy per rank, so they load only at the world size that wrote them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurm_acme.ckpt.fsio import checksum_file
from slurm_acme.ckpt.manifest import Manifest
from slurm_acme.ckpt.shardfile import CorruptShard, parse_header, read_shard
from slurm_acme.ckpt.tree import unflatten

FORMATS = ("acme", "dcp")


def load_legacy(step_path: Path, manifest: Manifest, rank: int) -> Any:
    """This rank's state from a version-1 checkpoint (checksums verified first)."""
    if manifest.format == "acme":
        mine = [s for s in manifest.shards if s.rank == rank]
        if len(mine) != 1:
            raise CorruptShard(f"{step_path}: manifest has no shard for rank {rank}")
        shard = read_shard(step_path / mine[0].file, mine[0].bytes, mine[0].checksum)
        return unflatten(shard.skeleton, shard.tensors)
    return _load_v1_dcp(step_path, manifest, rank)


def _load_v1_dcp(step_path: Path, manifest: Manifest, rank: int) -> Any:
    import torch
    import torch.distributed.checkpoint as dcp

    for shard in manifest.shards:
        if shard.rank == rank or shard.file.endswith(".metadata"):
            w = checksum_file(step_path / shard.file)
            if (w.bytes, w.checksum) != (shard.bytes, shard.checksum):
                raise CorruptShard(f"{step_path / shard.file}: {w.bytes} bytes {w.checksum}, "
                                   f"manifest says {shard.bytes} bytes {shard.checksum}")
    header_path = step_path / f"rank{rank:05d}.header"
    header, _ = parse_header(header_path.read_bytes(), header_path)
    template = {f"t{i}": torch.empty(slot["shape"], dtype=getattr(torch, slot["dtype"]))
                for i, slot in enumerate(header["tensors"])}
    state = {f"rank{rank}": template}
    dcp.load(state, storage_reader=dcp.FileSystemReader(step_path / "dcp"), no_dist=True)
    return unflatten(header["skeleton"], [template[f"t{i}"] for i in range(len(template))])
