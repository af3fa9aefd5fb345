"""The example's data sampler: deterministic, resumable, disjoint across ranks."""

from __future__ import annotations

import pytest
import torch

from slurm_acme.models.data import WindowSampler

TOKENS = torch.arange(1000)


def test_resuming_from_state_replays_the_same_sequence() -> None:
    a = WindowSampler(TOKENS, seq_len=8, batch_size=4, seed=1)
    for _ in range(30):  # crosses an epoch boundary (124 windows / 4 per batch)
        a.next_batch()
    state = a.state_dict()
    expected = [a.next_batch().fingerprint for _ in range(40)]
    b = WindowSampler(TOKENS, seq_len=8, batch_size=4, seed=1)
    b.load_state_dict(state)
    assert [b.next_batch().fingerprint for _ in range(40)] == expected


def test_targets_are_inputs_shifted_by_one() -> None:
    batch = WindowSampler(TOKENS, seq_len=8, batch_size=2).next_batch()
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])


def test_ranks_take_disjoint_slices_of_the_same_global_batch() -> None:
    r0 = WindowSampler(TOKENS, seq_len=8, batch_size=3, rank=0, world_size=2).next_batch()
    r1 = WindowSampler(TOKENS, seq_len=8, batch_size=3, rank=1, world_size=2).next_batch()
    assert r0.fingerprint == r1.fingerprint
    starts0 = set(r0.inputs[:, 0].tolist())
    assert starts0.isdisjoint(r1.inputs[:, 0].tolist())


def test_loading_a_state_from_another_batch_size_is_refused() -> None:
    state = WindowSampler(TOKENS, seq_len=8, batch_size=4).state_dict()
    with pytest.raises(ValueError, match="global_batch"):
        WindowSampler(TOKENS, seq_len=8, batch_size=2).load_state_dict(state)
