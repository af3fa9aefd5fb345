"""A deterministic, resumable sampler of fixed-length windows from a token stream.

Resuming a run must replay the exact data sequence of an uninterrupted run, so
the sampler's whole position is two integers (epoch, cursor) that go into the
checkpoint; each epoch's order is a permutation seeded by (seed, epoch).
Distributed ranks take disjoint slices of each global batch.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Batch:
    inputs: torch.Tensor
    targets: torch.Tensor
    global_indices: tuple[int, ...]

    @property
    def fingerprint(self) -> str:
        """Identifies the global batch (same on every rank), to compare data sequences."""
        return f"{zlib.crc32(repr(self.global_indices).encode()) & 0xFFFFFFFF:08x}"


class WindowSampler:
    def __init__(self, tokens: torch.Tensor, seq_len: int, batch_size: int, *, seed: int = 0,
                 rank: int = 0, world_size: int = 1) -> None:
        self.tokens = tokens
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed
        self.rank, self.world_size = rank, world_size
        self.n_windows = (len(tokens) - 1) // seq_len
        self.global_batch = batch_size * world_size
        if self.n_windows < self.global_batch:
            raise ValueError(f"corpus has {self.n_windows} windows of {seq_len} tokens; a global "
                             f"batch needs {self.global_batch}")
        self.epoch = 0
        self.cursor = 0
        self._perm = self._permutation(0)

    def _permutation(self, epoch: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.n_windows, generator=gen)

    def next_batch(self) -> Batch:
        if self.cursor + self.global_batch > self.n_windows:
            self.epoch += 1
            self.cursor = 0
            self._perm = self._permutation(self.epoch)
        window = self._perm[self.cursor:self.cursor + self.global_batch]
        self.cursor += self.global_batch
        mine = window[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]
        starts = mine * self.seq_len
        offsets = torch.arange(self.seq_len + 1)
        chunk = self.tokens[starts.unsqueeze(1) + offsets]
        return Batch(chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous(),
                     tuple(int(i) for i in window))

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "cursor": self.cursor, "seed": self.seed,
                "global_batch": self.global_batch, "n_windows": self.n_windows}

    def load_state_dict(self, state: dict[str, int]) -> None:
        for key in ("seed", "global_batch", "n_windows"):
            if state[key] != getattr(self, key):
                raise ValueError(f"sampler {key} was {state[key]} in the checkpoint, "
                                 f"{getattr(self, key)} now; the data sequence would differ")
        self.epoch = int(state["epoch"])
        self.cursor = int(state["cursor"])
        self._perm = self._permutation(self.epoch)
