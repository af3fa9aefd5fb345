"""The former native shard format (read for old checkpoints, see :mod:`legacy`):
a small JSON header, then the raw bytes of every tensor.

    b"ACMESHD1" | uint64 little-endian header length | header JSON | pad to 64 | data

The header holds the state skeleton (see :mod:`tree`) and each tensor's dtype,
shape, offset and size in the data section. Writing is one sequential stream
from the host arena (no serialisation on the persist path); reading is one
read plus one copy per tensor.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"ACMESHD1"
_ALIGN = 64


class CorruptShard(ValueError):
    """A checkpoint file whose size, checksum or structure is wrong."""


def encode_header(skeleton: Any, slots: list[dict], data_bytes: int) -> bytes:
    body = json.dumps({"skeleton": skeleton, "tensors": slots, "data_bytes": data_bytes},
                      separators=(",", ":")).encode()
    head = MAGIC + struct.pack("<Q", len(body)) + body
    pad = (-len(head)) % _ALIGN
    return head + b"\0" * pad


def parse_header(raw: bytes | bytearray, path: Path) -> tuple[dict, int]:
    """The header dict and the offset where the data section starts."""
    if raw[:8] != MAGIC or len(raw) < 16:
        raise CorruptShard(f"{path}: not an acme shard file")
    (hlen,) = struct.unpack("<Q", raw[8:16])
    try:
        header = json.loads(raw[16:16 + hlen])
    except ValueError as exc:
        raise CorruptShard(f"{path}: unreadable header: {exc}") from exc
    return header, 16 + hlen + (-(16 + hlen)) % _ALIGN


@dataclass(frozen=True)
class LoadedShard:
    """A shard read back and verified: the state's structure with tensor
    placeholders (``skeleton``) and the tensors, in the order the skeleton names."""

    skeleton: Any
    tensors: list  # list[torch.Tensor]


def read_shard(path: str | os.PathLike, expect_bytes: int | None = None,
               expect_checksum: str | None = None) -> LoadedShard:
    """Read and verify a shard; raise CorruptShard naming what is wrong."""
    import torch

    path = Path(path)
    raw = bytearray(path.read_bytes())
    if expect_bytes is not None and len(raw) != expect_bytes:
        raise CorruptShard(f"{path}: {len(raw)} bytes, manifest says {expect_bytes}")
    if expect_checksum is not None:
        got = f"crc32:{zlib.crc32(raw) & 0xFFFFFFFF:08x}"
        if got != expect_checksum:
            raise CorruptShard(f"{path}: checksum {got}, manifest says {expect_checksum}")
    header, start = parse_header(raw, path)
    if len(raw) - start != header["data_bytes"]:
        raise CorruptShard(f"{path}: data section is {len(raw) - start} bytes, header says "
                           f"{header['data_bytes']}")
    data = torch.frombuffer(raw, dtype=torch.uint8, offset=start) if header["data_bytes"] else (
        torch.empty(0, dtype=torch.uint8))
    tensors = []
    for slot in header["tensors"]:
        dtype = getattr(torch, slot["dtype"])
        if slot["nbytes"] == 0:
            tensors.append(torch.empty(slot["shape"], dtype=dtype))
            continue
        chunk = data[slot["offset"]:slot["offset"] + slot["nbytes"]]
        # Own the memory: a view into the file's bytearray crashes some consumers
        # (torch.set_rng_state segfaults on it).
        tensors.append(chunk.view(dtype).view(slot["shape"]).clone())
    return LoadedShard(skeleton=header["skeleton"], tensors=tensors)
