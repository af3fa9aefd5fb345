"""Reusable host buffers that a snapshot copies tensors into.

The training stall of an asynchronous save is this copy and nothing else, so
the arena is allocated once (pinned when CUDA is present, so device-to-host
copies are DMA; or in POSIX shared memory when a separate persist process must
read it) and reused for every save with the same tensor layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import shared_memory

import torch

ALIGN = 64


@dataclass(frozen=True)
class TensorSlot:
    """Where one tensor lives in the arena (and in the shard file's data section)."""

    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    def as_json(self) -> dict:
        return {"dtype": self.dtype, "shape": list(self.shape), "offset": self.offset,
                "nbytes": self.nbytes}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def plan_layout(tensors: list[torch.Tensor]) -> tuple[list[TensorSlot], int]:
    slots = []
    offset = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        slots.append(TensorSlot(dtype_name(t.dtype), tuple(t.shape), offset, nbytes))
        offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN
    return slots, offset


class HostArena:
    """One flat byte buffer holding a copy of every tensor of the last snapshot."""

    def __init__(self, shared: bool = False, pin: bool | None = None) -> None:
        self.shared = shared
        self.pin = torch.cuda.is_available() if pin is None else pin
        self.slots: list[TensorSlot] = []
        self.size = 0
        self.buffer = torch.empty(0, dtype=torch.uint8)
        self.shm: shared_memory.SharedMemory | None = None
        self.reallocations = 0

    @property
    def shm_name(self) -> str | None:
        return self.shm.name if self.shm is not None else None

    def _allocate(self, size: int) -> None:
        self.release()
        if self.shared:
            self.shm = shared_memory.SharedMemory(create=True, size=max(size, 1))
            self.buffer = torch.frombuffer(self.shm.buf, dtype=torch.uint8, count=max(size, 1))
        else:
            self.buffer = torch.empty(max(size, 1), dtype=torch.uint8, pin_memory=self.pin)
        self.buffer.zero_()  # fault pages in now, not during the first timed copy
        self.size = size
        self.reallocations += 1

    def snapshot(self, tensors: list[torch.Tensor]) -> list[TensorSlot]:
        """Copy `tensors` into the arena (re-planning only if the layout changed)."""
        slots, size = plan_layout(tensors)
        if slots != self.slots or size > self.buffer.numel():
            self._allocate(size)
        self.slots = slots
        needs_sync = False
        for t, slot in zip(tensors, slots):
            if slot.nbytes == 0:
                continue
            dst = self.buffer[slot.offset:slot.offset + slot.nbytes].view(t.dtype).view(t.shape)
            dst.copy_(t, non_blocking=t.is_cuda)
            needs_sync = needs_sync or t.is_cuda
        if needs_sync:
            torch.cuda.synchronize()
        return slots

    def data(self) -> memoryview:
        """The bytes of the last snapshot (valid until the next snapshot)."""
        if self.size == 0:
            return memoryview(b"")
        if self.shm is not None:
            return self.shm.buf[:self.size]
        return memoryview(self.buffer.numpy()).cast("B")[:self.size]

    def release(self) -> None:
        self.buffer = torch.empty(0, dtype=torch.uint8)
        if self.shm is not None:
            self.shm.close()
            self.shm.unlink()
            self.shm = None
        self.slots = []
        self.size = 0
