"""Steps read from trainers' own output, and the hang clock's two limits."""

from __future__ import annotations

import json

import pytest

from slurm_acme.ft.progress import DEFAULT_PATTERNS, HangClock, ProgressLog, compile_patterns, step_of_line


@pytest.mark.parametrize("line,step", [
    # HF Trainer / Accelerate (tqdm)
    (" 45%|████▌     | 450/1000 [00:10<00:12, 44.1it/s]", 450),
    # Lightning: batch 450 of 1000 in epoch 3
    ("Epoch 3:  45%|████▌     | 450/1000 [00:10<00:12, 44.1it/s, v_num=0, loss=2.3]", 3450),
    # Megatron-LM
    (" iteration      100/   10000 | consumed samples:         3200 | elapsed time per iteration (ms): 120.3", 100),
    # torchtitan
    ("[titan] 2025-01-01 12:00:00,000 - root - INFO - step:  7  loss:  9.1234  memory: 10.2GiB", 7),
    # plain
    ("step 12 loss 2.31", 12),
    ("Step 12/100 | loss 2.3", 12),
    ("global_step=40 lr=1e-4", 40),
])
def test_default_patterns_read_the_common_trainers(line: str, step: int) -> None:
    assert step_of_line(line, DEFAULT_PATTERNS) == step


@pytest.mark.parametrize("line", ["steps: 100 total", "step_size=3", "stepping up",
                                  "{'loss': 2.3, 'grad_norm': 1.1, 'epoch': 0.5}",
                                  "NCCL INFO Channel 00/02 : 0 1"])
def test_lines_without_a_step_are_not_steps(line: str) -> None:
    assert step_of_line(line, DEFAULT_PATTERNS) is None


def test_user_patterns_come_first_and_defaults_can_be_off() -> None:
    patterns = compile_patterns([r"it=(\d+)"], defaults=False)
    assert step_of_line("it=5 step 9", patterns) == 5
    assert step_of_line("step 9", patterns) is None
    assert step_of_line("it=5 step 9", compile_patterns([r"it=(\d+)"])) == 5


def test_clock_before_the_first_step_applies_startup_timeout_to_silence() -> None:
    clock = HangClock(hang_timeout=10, startup_timeout=100, started=0.0)
    assert clock.hang(now=99) is None
    hang = clock.hang(now=101)
    assert hang is not None and hang.limit_name == "startup_timeout" and hang.limit_s == 100


def test_output_is_a_heartbeat_in_both_phases() -> None:
    clock = HangClock(hang_timeout=10, startup_timeout=100, started=0.0)
    clock.beat(now=90)
    assert clock.hang(now=180) is None
    assert clock.step(1, now=185)
    clock.beat(now=194)
    assert clock.hang(now=203) is None
    hang = clock.hang(now=205)
    assert hang is not None and hang.limit_name == "hang_timeout" and hang.last_step == 1
    assert "hang_timeout 10s; last step 1" in hang.reason


def test_a_repeated_step_is_not_new_progress() -> None:
    clock = HangClock(hang_timeout=10, startup_timeout=100, started=0.0)
    assert clock.step(3, now=1) and not clock.step(3, now=2) and clock.step(4, now=3)


def test_progress_log_keeps_one_record_per_new_highest_step(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = ProgressLog(tmp_path / "p.jsonl")
    for step in (1, 1, 2, 2, 1, 3):  # two ranks print each step
        log.record(step, now=float(step))
    log.close()
    records = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [(r["step"], r["event"], r["rank"]) for r in records] == [(1, "step", 0), (2, "step", 0), (3, "step", 0)]
