"""The former native format (manifest v1, one shard file per rank): still read, so a run
that started under it resumes. The files are written here as that format wrote them."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from state_equal import assert_same_state

from slurm_acme.ckpt.checkpointer import AsyncCheckpointer, CheckpointMismatch
from slurm_acme.ckpt.fsio import LocalFS
from slurm_acme.ckpt.manifest import MANIFEST_NAME, Manifest, ShardRecord
from slurm_acme.ckpt.shardfile import CorruptShard, encode_header, read_shard
from slurm_acme.ckpt.tree import flatten, unflatten


def _state() -> dict:
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optim": opt.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                    "numpy": np.random.get_state()},
            "blob": b"\x00\x01", "half": torch.ones(3, dtype=torch.bfloat16),
            "flag": torch.tensor([True, False]), "empty": torch.empty(0, 5)}


def test_flatten_round_trips_model_optimizer_and_rng_state() -> None:
    state = _state()
    skeleton, tensors = flatten(state)
    json.dumps(skeleton)  # the skeleton is plain JSON, never pickle
    assert_same_state(state, unflatten(json.loads(json.dumps(skeleton)), tensors))


def test_flatten_names_the_path_of_an_unsupported_value() -> None:
    with pytest.raises(TypeError, match=r"state\.extra"):
        flatten({"extra": object()})


def _shard_bytes(state) -> bytes:  # type: ignore[no-untyped-def]
    """A shard file as the native format wrote it: header, then aligned raw tensor bytes."""
    skeleton, tensors = flatten(state)
    slots, data, offset = [], bytearray(), 0
    for t in tensors:
        raw = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        slots.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                      "offset": offset, "nbytes": len(raw)})
        data += raw + b"\0" * ((-len(raw)) % 64)
        offset = len(data)
    return encode_header(skeleton, slots, len(data)) + bytes(data)


def _write_v1_checkpoint(ckpt_dir: Path, step: int, states: list) -> Path:  # type: ignore[type-arg]
    step_path = ckpt_dir / f"step_{step:08d}"
    step_path.mkdir(parents=True)
    records = []
    for rank, state in enumerate(states):
        written = LocalFS().write_atomic(step_path / f"rank{rank:05d}.acme", [_shard_bytes(state)])
        records.append(ShardRecord(rank, f"rank{rank:05d}.acme", written.bytes, written.checksum))
    manifest = Manifest(step=step, format="acme", world_size=len(states), created_ts=time.time(),
                        shards=tuple(records), version=1)
    (step_path / MANIFEST_NAME).write_text(manifest.to_json())
    return step_path


def test_shard_file_round_trips_model_optimizer_and_rng_state(tmp_path: Path) -> None:
    state = _state()
    path = tmp_path / "rank00000.acme"
    path.write_bytes(_shard_bytes(state))
    shard = read_shard(path)
    assert_same_state(state, unflatten(shard.skeleton, shard.tensors))


def test_read_shard_accepts_a_str_path(tmp_path: Path) -> None:
    path = tmp_path / "rank00000.acme"
    path.write_bytes(_shard_bytes({"w": torch.arange(4.0)}))
    shard = read_shard(str(path))
    assert torch.equal(unflatten(shard.skeleton, shard.tensors)["w"], torch.arange(4.0))


def test_read_shard_rejects_wrong_checksum_and_size(tmp_path: Path) -> None:
    path = tmp_path / "s.acme"
    path.write_bytes(encode_header({"T": 0}, [], 0))
    with pytest.raises(CorruptShard, match="checksum"):
        read_shard(path, expect_checksum="crc32:00000000")
    with pytest.raises(CorruptShard, match="bytes"):
        read_shard(path, expect_bytes=1)


def test_loaded_rng_state_can_be_restored_and_replays_the_stream(tmp_path: Path) -> None:
    """Regression: tensors that were views into the file buffer crashed set_rng_state."""
    path = tmp_path / "rng.acme"
    path.write_bytes(_shard_bytes({"rng": torch.get_rng_state()}))
    expected = torch.rand(3)
    shard = read_shard(path)
    torch.set_rng_state(unflatten(shard.skeleton, shard.tensors)["rng"])
    assert torch.equal(torch.rand(3), expected)


def test_a_v1_checkpoint_is_resumed_and_newer_saves_are_dcp(tmp_path: Path) -> None:
    state = _state()
    _write_v1_checkpoint(tmp_path, 4, [state])
    ck = AsyncCheckpointer(tmp_path, keep=5)
    resumed = ck.resume(resume_from="")
    assert resumed is not None and resumed.step == 4 and resumed.rank_state is None
    assert_same_state(state, resumed.state)
    ck.save(5, {"w": torch.ones(2)})
    assert ck.wait().committed  # type: ignore[union-attr]
    assert (tmp_path / "step_00000005" / ".metadata").is_file()
    assert ck.resume(resume_from="").step == 5  # type: ignore[union-attr]


def test_a_v1_checkpoint_of_another_world_size_is_refused_by_name(tmp_path: Path) -> None:
    _write_v1_checkpoint(tmp_path, 4, [{"w": torch.ones(1)}, {"w": torch.zeros(1)}])
    with pytest.raises(CheckpointMismatch, match="written by 2 ranks; this job has 1"):
        AsyncCheckpointer(tmp_path).resume(resume_from="")
