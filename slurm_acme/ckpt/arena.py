"""The host arena: reused host memory that a snapshot copies tensors into.

The training stall of an asynchronous save is this copy and nothing else, so it
is made as close to a plain ``memcpy`` as the machine allows:

* one flat buffer, allocated once per tensor layout and pre-faulted, so a save
  never pays for page faults or allocation; pinned (page-locked) when CUDA is
  present, so device-to-host copies are DMA;
* host tensors are copied by ``memmove`` on a few threads (the call releases
  the GIL), in chunks so one large tensor is shared between them, with one
  Python call per chunk rather than a torch dispatch per tensor;
* device tensors are copied with ``non_blocking=True`` on a side stream that
  first waits for the training stream, overlapping the host copies, and the
  stall ends only after that stream is synchronised.

Each destination tensor is made with ``torch.frombuffer`` over its own slice of
the buffer, so it owns a storage of exactly its size: the DCP writer serialises
it directly (a plain view of a larger buffer would be cloned first).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import torch

ALIGN = 64
#: Host copies are cut into chunks of this size so that threads share large tensors.
CHUNK_BYTES = 16 * 1024 * 1024
#: Below this many bytes a snapshot is copied on the calling thread (threads cost more).
PARALLEL_MIN_BYTES = 32 * 1024 * 1024

_memmove = ctypes.memmove


@dataclass(frozen=True)
class Slot:
    """Where one tensor's bytes live in the arena."""

    offset: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]


def plan_layout(tensors: Sequence[torch.Tensor]) -> tuple[tuple[Slot, ...], int]:
    """Aligned slots for `tensors`, in order, and the arena size they need."""
    slots = []
    offset = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        slots.append(Slot(offset, nbytes, t.dtype, tuple(t.shape)))
        offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN
    return tuple(slots), offset


def default_copy_threads() -> int:
    """Memory bandwidth saturates after a few threads; more only add contention."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


class DeviceCopier(Protocol):
    """Copies device tensors into host memory asynchronously; `synchronize` waits for all."""

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None: ...

    def synchronize(self) -> None: ...


class CudaCopier:
    """Device-to-host copies on one side stream per device.

    Each side stream first waits for the device's current (training) stream, so the
    copy sees the optimizer's last update; copies are ``non_blocking`` into pinned
    memory (DMA, overlapping the host copies); `synchronize` waits for every stream
    used since the last call. `cuda` is the ``torch.cuda`` module (a parameter so the
    stream protocol can be tested without a GPU).
    """

    def __init__(self, cuda: Any = None) -> None:
        self.cuda = cuda if cuda is not None else torch.cuda
        self._streams: dict[Any, Any] = {}
        self._used: list[Any] = []

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        device = src.device
        stream = self._streams.get(device)
        if stream is None:
            stream = self._streams[device] = self.cuda.Stream(device=device)
        if stream not in self._used:
            stream.wait_stream(self.cuda.current_stream(device))
            self._used.append(stream)
        with self.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)

    def synchronize(self) -> None:
        used, self._used = self._used, []
        for stream in used:
            stream.synchronize()


def _host_empty(nbytes: int, pinned: bool) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)


class HostArena:
    """One flat host buffer holding a copy of every tensor of the last snapshot.

    `pin` defaults to "CUDA is available"; `threads` to :func:`default_copy_threads`;
    `device` to a :class:`CudaCopier` (created on first use).
    """

    def __init__(self, *, pin: bool | None = None, threads: int | None = None,
                 device: DeviceCopier | None = None) -> None:
        self.pin = torch.cuda.is_available() if pin is None else pin
        self.threads = default_copy_threads() if threads is None else threads
        if self.threads < 1:
            raise ValueError(f"copy threads={self.threads}: must be >= 1")
        self._device = device
        self.slots: tuple[Slot, ...] = ()
        self.size = 0
        self.buffer = torch.empty(0, dtype=torch.uint8)
        self.views: list[torch.Tensor] = []
        self._key: tuple[list, list] | None = None
        self._addrs: list[int] = []
        self._nbytes: list[int] = []
        self.reallocations = 0
        self._pool: ThreadPoolExecutor | None = None

    @property
    def device(self) -> DeviceCopier:
        if self._device is None:
            self._device = CudaCopier()
        return self._device

    def reserve(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Lay out (and if needed allocate) the arena for `tensors`; the destinations."""
        key = ([t.dtype for t in tensors], [t.shape for t in tensors])
        if key != self._key:
            slots, size = plan_layout(tensors)
            if size > self.buffer.numel():
                self._allocate(size)
            self.slots, self.size, self._key = slots, size, key
            self.views = self._make_views(slots)
            base = self.buffer.data_ptr() if self.buffer.numel() else 0
            self._addrs = [base + s.offset for s in slots]
            self._nbytes = [s.nbytes for s in slots]
        return self.views

    def _allocate(self, size: int) -> None:
        self.buffer = torch.empty(0, dtype=torch.uint8)  # free the old one first
        self.buffer = _host_empty(size, self.pin)
        self.buffer.zero_()  # fault the pages in now, not during the first timed copy
        self.reallocations += 1

    def _make_views(self, slots: tuple[Slot, ...]) -> list[torch.Tensor]:
        raw = memoryview(self.buffer.numpy()) if self.buffer.numel() else None  # type: ignore[arg-type]
        views = []
        for slot in slots:
            if slot.nbytes == 0 or raw is None:
                views.append(torch.empty(slot.shape, dtype=slot.dtype))
            else:
                count = slot.nbytes // torch.empty(0, dtype=slot.dtype).element_size()
                flat = torch.frombuffer(raw, dtype=slot.dtype, count=count, offset=slot.offset)
                views.append(flat.view(slot.shape))
        return views

    def snapshot(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Copy `tensors` (dense) into the arena; return the host copies (valid until the
        next call)."""
        dsts = self.reserve(tensors)
        host: list[tuple[int, int, int]] = []  # (dst address, src address, bytes)
        slow: list[tuple[torch.Tensor, torch.Tensor]] = []
        on_device = False
        for src, dst, addr, n in zip(tensors, dsts, self._addrs, self._nbytes, strict=True):
            if not n:
                continue
            if src.is_cpu:
                if src.is_contiguous() and not (src.is_conj() or src.is_neg()):
                    host.append((addr, src.data_ptr(), n))
                else:
                    slow.append((dst, src))
            else:
                self.device.copy(dst, src)  # asynchronous: overlaps the host copies
                on_device = True
        self._copy_host(host)
        for dst, src in slow:
            dst.copy_(src)
        if on_device:
            self.device.synchronize()
        return dsts

    def _copy_host(self, items: list[tuple[int, int, int]]) -> None:
        total = sum(n for _, _, n in items)
        if self.threads == 1 or total < PARALLEL_MIN_BYTES:
            for dst, src, n in items:
                _memmove(dst, src, n)
            return
        parts = split_work(items, self.threads)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="acme-ckpt-copy")
        futures = [self._pool.submit(_copy_chunks, part) for part in parts[1:]]
        _copy_chunks(parts[0])  # the calling thread takes a share too
        for f in futures:
            f.result()

    def release(self) -> None:
        """Free the buffer and the copy threads (the next snapshot allocates again)."""
        self.views, self._addrs, self._nbytes, self._key = [], [], [], None
        self.buffer = torch.empty(0, dtype=torch.uint8)
        self.slots, self.size = (), 0
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _copy_chunks(chunks: list[tuple[int, int, int]]) -> None:
    for dst, src, n in chunks:
        _memmove(dst, src, n)


def split_work(items: list[tuple[int, int, int]], threads: int
               ) -> list[list[tuple[int, int, int]]]:
    """Cut (dst, src, bytes) copies into chunks and deal them into `threads` parts of
    nearly equal bytes (each part a contiguous run, so neighbours stay together)."""
    total = sum(n for _, _, n in items)
    share = -(-total // threads)
    parts: list[list[tuple[int, int, int]]] = [[] for _ in range(threads)]
    filled = 0
    for dst, src, n in items:
        done = 0
        while done < n:
            part = min(filled // share, threads - 1) if share else 0
            room = share * (part + 1) - filled if part < threads - 1 else n - done
            take = min(n - done, CHUNK_BYTES, max(room, 1))
            parts[part].append((dst + done, src + done, take))
            done += take
            filled += take
    return [p for p in parts if p] or [[]]
