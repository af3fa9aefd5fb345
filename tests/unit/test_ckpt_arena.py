"""The host arena: the stall's copy. CUDA is faked at its boundary (availability, pinned
allocation, streams); the arena's own decisions and copies are real."""

from __future__ import annotations

import random

import pytest
import torch

from slurm_acme.ckpt import arena as arena_mod
from slurm_acme.ckpt.arena import CudaCopier, HostArena, split_work


def _tensors() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1000, generator=g), torch.randint(0, 9, (3, 5), generator=g),
            torch.ones(7, dtype=torch.bfloat16), torch.tensor([True, False]),
            torch.empty(0, 4), torch.tensor(3.5)]


def test_snapshot_copies_every_dtype_and_shape() -> None:
    src = _tensors()
    out = HostArena(threads=1).snapshot(src)
    for a, b in zip(src, out, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_snapshot_is_a_copy_not_a_view_of_live_parameters() -> None:
    t = torch.zeros(10)
    (copy,) = HostArena().snapshot([t])
    t.fill_(7)
    assert torch.equal(copy, torch.zeros(10))


def test_each_copy_owns_a_storage_of_exactly_its_size() -> None:
    """DCP's writer clones a tensor whose storage is larger than itself; ours never is."""
    for t in HostArena().snapshot(_tensors()):
        if t.numel():
            assert t.untyped_storage().nbytes() == t.nbytes


def test_the_arena_is_reused_while_the_layout_is_unchanged() -> None:
    arena = HostArena()
    t = torch.randn(100)
    arena.snapshot([t])
    buf = arena.buffer.data_ptr()
    t.add_(1)
    (copy,) = arena.snapshot([t])
    assert arena.buffer.data_ptr() == buf and arena.reallocations == 1
    assert torch.equal(copy, t)
    arena.snapshot([torch.randn(200)])  # a new layout re-plans (and grows)
    assert arena.reallocations == 2


def test_non_contiguous_and_lazily_conjugated_tensors_are_copied_by_value() -> None:
    base = torch.arange(12.0).view(3, 4)
    conj = torch.tensor([1 + 2j, 3 - 1j]).conj()
    out = HostArena().snapshot([base.t(), base[:, 1], conj])
    assert torch.equal(out[0], base.t()) and out[0].is_contiguous()
    assert torch.equal(out[1], base[:, 1])
    assert torch.equal(out[2], torch.tensor([1 - 2j, 3 + 1j])) and not out[2].is_conj()


def test_threaded_copy_splits_large_tensors_and_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arena_mod, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(arena_mod, "CHUNK_BYTES", 4096)
    src = [torch.randn(50_000), torch.randn(3), torch.randn(20_001)]
    arena = HostArena(threads=3)
    out = arena.snapshot(src)
    assert arena._pool is not None  # the threads did run
    assert all(torch.equal(a, b) for a, b in zip(src, out, strict=True))
    arena.release()


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_split_work_covers_every_byte_once_in_balanced_parts(
        monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    monkeypatch.setattr(arena_mod, "CHUNK_BYTES", 1000)
    rng = random.Random(threads)
    items, dst = [], 0
    for _ in range(20):
        n = rng.randint(1, 5000)
        items.append((dst, 10**9 + dst, n))
        dst += n
    parts = split_work(items, threads)
    pieces = sorted(c for part in parts for c in part)
    covered = 0
    for d, s, n in pieces:
        assert d == covered and s == 10**9 + d and 0 < n <= 1000
        covered += n
    assert covered == dst and len(parts) <= threads
    sizes = [sum(n for _, _, n in p) for p in parts]
    assert max(sizes) - min(sizes) <= 1000 * 2  # balanced to within a chunk or two


def test_pinned_memory_is_requested_when_cuda_is_available(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    calls: list[tuple[int, bool]] = []

    def fake_empty(nbytes: int, pinned: bool) -> torch.Tensor:
        calls.append((nbytes, pinned))
        return torch.empty(nbytes, dtype=torch.uint8)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(arena_mod, "_host_empty", fake_empty)
    arena = HostArena()
    arena.snapshot([torch.ones(16)])
    assert arena.pin and calls == [(64, True)]
    assert not HostArena(pin=False).pin


class RecordingCopier:
    """A device boundary that records calls; copies fill with a marker value."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        self.calls.append(f"copy:{src.device.type}:{tuple(src.shape)}")
        dst.fill_(5)

    def synchronize(self) -> None:
        self.calls.append("synchronize")


def test_device_tensors_go_to_the_device_copier_and_are_synced_before_the_stall_ends() -> None:
    device = RecordingCopier()
    host = torch.arange(4.0)
    on_device = torch.empty(3, device="meta")  # stands in for a CUDA tensor
    out = HostArena(device=device).snapshot([on_device, host])
    assert device.calls == ["copy:meta:(3,)", "synchronize"]
    assert torch.equal(out[0], torch.full((3,), 5.0)) and torch.equal(out[1], host)


def test_host_only_snapshots_never_touch_the_device() -> None:
    device = RecordingCopier()
    HostArena(device=device).snapshot([torch.ones(2)])
    assert device.calls == []


class FakeStream:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def wait_stream(self, other: FakeStream) -> None:
        self.log.append(f"{self.name}.wait({other.name})")

    def synchronize(self) -> None:
        self.log.append(f"{self.name}.synchronize")


class FakeCuda:
    """torch.cuda's stream API, recording what the copier asks of it."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.current: str | None = None

    def Stream(self, device: str) -> FakeStream:  # torch.cuda's name
        self.log.append(f"new stream on {device}")
        return FakeStream(self.log, f"side[{device}]")

    def current_stream(self, device: str) -> FakeStream:
        return FakeStream(self.log, f"train[{device}]")

    def stream(self, s: FakeStream):  # type: ignore[no-untyped-def]
        cuda = self

        class Ctx:
            def __enter__(self) -> None:
                cuda.current = s.name

            def __exit__(self, *exc: object) -> None:
                cuda.current = None

        return Ctx()


class FakeDeviceTensor:
    def __init__(self, cuda: FakeCuda, device: str) -> None:
        self.cuda, self.device = cuda, device


class FakeHostTensor:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda

    def copy_(self, src: FakeDeviceTensor, non_blocking: bool = False) -> None:
        self.cuda.log.append(f"copy from {src.device} on {self.cuda.current} "
                             f"non_blocking={non_blocking}")


def test_cuda_copier_waits_for_training_then_copies_asynchronously_then_syncs() -> None:
    cuda = FakeCuda()
    copier = CudaCopier(cuda)
    for device in ("cuda:0", "cuda:0", "cuda:1"):
        copier.copy(FakeHostTensor(cuda), FakeDeviceTensor(cuda, device))  # type: ignore[arg-type]
    copier.synchronize()
    assert cuda.log == [
        "new stream on cuda:0", "side[cuda:0].wait(train[cuda:0])",
        "copy from cuda:0 on side[cuda:0] non_blocking=True",
        "copy from cuda:0 on side[cuda:0] non_blocking=True",
        "new stream on cuda:1", "side[cuda:1].wait(train[cuda:1])",
        "copy from cuda:1 on side[cuda:1] non_blocking=True",
        "side[cuda:0].synchronize", "side[cuda:1].synchronize"]
    cuda.log.clear()
    copier.copy(FakeHostTensor(cuda), FakeDeviceTensor(cuda, "cuda:0"))  # type: ignore[arg-type]
    copier.synchronize()  # the next snapshot waits for training again, on the same stream
    assert cuda.log == ["side[cuda:0].wait(train[cuda:0])",
                        "copy from cuda:0 on side[cuda:0] non_blocking=True",
                        "side[cuda:0].synchronize"]
