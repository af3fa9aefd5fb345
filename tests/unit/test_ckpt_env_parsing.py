"""ACME_FAULTS, ACME_SKIP_STEPS and the rank/world variables of torchrun and srun."""

from __future__ import annotations

import pytest

from slurm_acme.ckpt.distenv import dist_env
from slurm_acme.ckpt.faults import Fault, FaultInjector, parse_faults
from slurm_acme.ckpt.skips import parse_step_ranges


def test_parses_the_documented_example_with_a_message_containing_a_colon() -> None:
    faults = parse_faults("raise:step=6,node=node2,message=NCCL error: unhandled system error;"
                          "spike:step=9")
    assert faults == (
        Fault("raise", 6, node="node2", message="NCCL error: unhandled system error"),
        Fault("spike", 9))


def test_message_may_contain_commas_and_equals() -> None:
    (fault,) = parse_faults("raise:step=1,message=a, b=c,rank=1")
    assert fault.message == "a, b=c" and fault.rank == 1


@pytest.mark.parametrize("text, fragment", [
    ("explode:step=1", "unknown kind"),
    ("nan:rank=1", "step=N is required"),
    ("nan:step=x", "invalid literal"),
    ("nan:bogus=1", "expected key=value"),
])
def test_bad_faults_are_rejected_with_the_offending_text(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_faults(text)


def test_filters_match_rank_node_and_attempt() -> None:
    env = {"ACME_FAULTS": "raise:step=3,rank=1,node=node2,attempt=0,message=boom",
           "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURMD_NODENAME": "node2"}
    with pytest.raises(RuntimeError, match=r"^boom$"):
        FaultInjector.from_env(env).before_step(3)
    FaultInjector.from_env(env).before_step(2)
    FaultInjector.from_env({**env, "SLURM_PROCID": "0"}).before_step(3)
    FaultInjector.from_env({**env, "SLURMD_NODENAME": "node1"}).before_step(3)
    FaultInjector.from_env({**env, "SLURM_RESTART_COUNT": "1"}).before_step(3)


def test_nan_and_spike_faults_change_only_their_step() -> None:
    inj = FaultInjector(parse_faults("spike:step=4,factor=100;nan:step=5"), 0, "n", 0)
    assert inj.corrupt_loss(3, 2.0) == 2.0
    assert inj.corrupt_loss(4, 2.0) == 200.0
    assert inj.corrupt_loss(5, 2.0) != inj.corrupt_loss(5, 2.0)  # NaN


def test_skip_ranges_are_inclusive_and_accept_single_steps() -> None:
    ranges = parse_step_ranges("100-120, 300")
    assert 100 in ranges and 120 in ranges and 300 in ranges
    assert 99 not in ranges and 121 not in ranges and 301 not in ranges
    assert str(ranges) == "100-120,300-300"


@pytest.mark.parametrize("text", ["a-b", "5-3", "-1"])
def test_bad_skip_ranges_name_the_part(text: str) -> None:
    with pytest.raises(ValueError, match="ACME_SKIP_STEPS"):
        parse_step_ranges(text)


def test_torchrun_variables_win_over_slurm_ones() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
           "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    assert (dist_env(env).rank, dist_env(env).world_size, dist_env(env).local_rank) == (3, 4, 1)
    slurm = {"SLURM_PROCID": "2", "SLURM_NTASKS": "8", "SLURM_LOCALID": "0"}
    assert (dist_env(slurm).rank, dist_env(slurm).world_size) == (2, 8)
    assert not dist_env({}).distributed


def test_fault_attempt_is_the_supervisors_attempt_when_given() -> None:
    env = {"ACME_FAULTS": "raise:step=3,attempt=0", "SLURM_RESTART_COUNT": "0"}
    with pytest.raises(RuntimeError):
        FaultInjector.from_env(env).before_step(3)
    # a restart inside the allocation: same SLURM_RESTART_COUNT, the next attempt
    FaultInjector.from_env({**env, "ACME_ATTEMPT": "1"}).before_step(3)
