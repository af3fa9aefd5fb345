"""Reusable host buffers that a snapshot copies tensors into.

The training stall of an asynchronous save is this copy and nothing else, so
the arena is allocated once (pinned when CUDA is present, so device-to-host
copies are DMA; or in POSIX shared memory when a separate persist process must
read it) and reused for every save with the same tensor layout.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from multiprocessing import shared_memory

import torch

ALIGN = 64
log = logging.getLogger(__name__)


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


def shm_free_bytes(path: str = "/dev/shm") -> int:
    """Free space of the tmpfs that backs POSIX shared memory (0 if it is missing)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


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
        self.name_unlinked = False

    @property
    def shm_name(self) -> str | None:
        return self.shm.name if self.shm is not None else None

    def _allocate(self, size: int) -> None:
        self.release()
        if self.shared:
            self.shm = shared_memory.SharedMemory(create=True, size=max(size, 1))
            self.name_unlinked = False
            self.buffer = torch.frombuffer(self.shm.buf, dtype=torch.uint8, count=max(size, 1))
            if self.pin:
                self._register_pinned()
        else:
            self.buffer = torch.empty(max(size, 1), dtype=torch.uint8, pin_memory=self.pin)
        self.buffer.zero_()  # fault pages in now, not during the first timed copy
        self.size = size
        self.reallocations += 1

    def _register_pinned(self) -> None:
        """Page-lock the shared arena so device-to-host copies are DMA, as with pin_memory."""
        rc = torch.cuda.cudart().cudaHostRegister(self.buffer.data_ptr(), self.buffer.numel(), 0)
        if int(rc) != 0:
            log.warning("could not pin the shared checkpoint arena (cudaHostRegister=%s); "
                        "device-to-host copies will be slower", rc)
            self.pin = False

    def needs_bytes(self, tensors: list[torch.Tensor]) -> int:
        """Bytes a new allocation would need for `tensors` (0 if the arena fits already)."""
        slots, size = plan_layout(tensors)
        return 0 if slots == self.slots and size <= self.buffer.numel() else size

    def reserve(self, tensors: list[torch.Tensor]) -> list[TensorSlot]:
        """Lay out (and if needed allocate) the arena for `tensors` without copying."""
        slots, size = plan_layout(tensors)
        if slots != self.slots or size > self.buffer.numel():
            self._allocate(size)
        self.slots = slots
        return slots

    def snapshot(self, tensors: list[torch.Tensor]) -> list[TensorSlot]:
        """Copy `tensors` into the arena (re-planning only if the layout changed)."""
        slots = self.reserve(tensors)
        needs_sync = False
        for t, slot in zip(tensors, slots, strict=False):
            if slot.nbytes == 0:
                continue
            dst = self.buffer[slot.offset:slot.offset + slot.nbytes].view(t.dtype).view(t.shape)
            dst.copy_(t, non_blocking=t.is_cuda)
            needs_sync = needs_sync or t.is_cuda
        if needs_sync:
            torch.cuda.synchronize()
        return slots

    def unlink_name(self) -> None:
        """Remove the segment's name from /dev/shm; mappings stay valid until closed."""
        if self.shm is not None and not self.name_unlinked:
            self.shm.unlink()
            self.name_unlinked = True

    def invalidate(self) -> None:
        """Force the next snapshot to allocate a fresh arena."""
        self.slots = []
        self.size = 0

    def data(self) -> memoryview:
        """The bytes of the last snapshot (valid until the next snapshot)."""
        if self.size == 0:
            return memoryview(b"")
        if self.shm is not None:
            return self.shm.buf[:self.size]
        return memoryview(self.buffer.numpy()).cast("B")[:self.size]

    def release(self) -> None:
        if self.shm is not None and self.pin and self.buffer.numel():
            torch.cuda.cudart().cudaHostUnregister(self.buffer.data_ptr())
        self.buffer = torch.empty(0, dtype=torch.uint8)
        if self.shm is not None:
            self.shm.close()
            if not self.name_unlinked:
                self.shm.unlink()
            self.shm = None
        self.slots = []
        self.size = 0
