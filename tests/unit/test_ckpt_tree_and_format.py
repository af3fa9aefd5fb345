"""Flattening a training state to skeleton + tensors and the shard file format."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from slurm_acme.ckpt.arena import HostArena
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


def _assert_same(a, b) -> None:  # type: ignore[no-untyped-def]
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=False):
            _assert_same(x, y)
    else:
        assert a == b


def test_flatten_round_trips_model_optimizer_and_rng_state() -> None:
    state = _state()
    skeleton, tensors = flatten(state)
    json.dumps(skeleton)  # the skeleton is plain JSON, never pickle
    _assert_same(state, unflatten(json.loads(json.dumps(skeleton)), tensors))


def test_flatten_names_the_path_of_an_unsupported_value() -> None:
    with pytest.raises(TypeError, match=r"state\.extra"):
        flatten({"extra": object()})


def test_shard_file_round_trips_through_the_arena(tmp_path: Path) -> None:
    state = _state()
    skeleton, tensors = flatten(state)
    arena = HostArena()
    slots = arena.snapshot(tensors)
    header = encode_header(skeleton, [s.as_json() for s in slots], arena.size)
    path = tmp_path / "rank00000.acme"
    path.write_bytes(header + bytes(arena.data()))
    shard = read_shard(path)
    _assert_same(state, unflatten(shard.skeleton, shard.tensors))


def test_arena_is_reused_when_the_layout_is_unchanged() -> None:
    arena = HostArena()
    t = torch.randn(100)
    arena.snapshot([t])
    buf = arena.buffer.data_ptr()
    t.add_(1)
    arena.snapshot([t])
    assert arena.buffer.data_ptr() == buf and arena.reallocations == 1
    assert torch.equal(arena.buffer[:400].view(torch.float32), t)


def test_snapshot_is_a_copy_not_a_view_of_live_parameters() -> None:
    arena = HostArena()
    t = torch.zeros(10)
    arena.snapshot([t])
    t.fill_(7)
    assert torch.equal(arena.buffer[:40].view(torch.float32), torch.zeros(10))


def test_read_shard_rejects_wrong_checksum_and_size(tmp_path: Path) -> None:
    path = tmp_path / "s.acme"
    path.write_bytes(encode_header({"T": 0}, [], 0))
    with pytest.raises(CorruptShard, match="checksum"):
        read_shard(path, expect_checksum="crc32:00000000")
    with pytest.raises(CorruptShard, match="bytes"):
        read_shard(path, expect_bytes=1)


def test_loaded_rng_state_can_be_restored_and_replays_the_stream(tmp_path: Path) -> None:
    """Regression: tensors that were views into the file buffer crashed set_rng_state."""
    skeleton, tensors = flatten({"rng": torch.get_rng_state()})
    arena = HostArena()
    slots = arena.snapshot(tensors)
    path = tmp_path / "rng.acme"
    path.write_bytes(encode_header(skeleton, [s.as_json() for s in slots], arena.size)
                     + bytes(arena.data()))
    expected = torch.rand(3)
    shard = read_shard(path)
    torch.set_rng_state(unflatten(shard.skeleton, shard.tensors)["rng"])
    assert torch.equal(torch.rand(3), expected)
