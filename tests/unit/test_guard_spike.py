"""The loss-spike guard: NaN/Inf, spikes over the EMA after warm-up, metrics, exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_acme import exitcodes
from slurm_acme.ckpt.guard import LossSpikeGuard, Verdict
from slurm_acme.ckpt.metrics import MetricsWriter, read_metrics


def _guard(tmp_path: Path, **kw) -> LossSpikeGuard:  # type: ignore[no-untyped-def]
    return LossSpikeGuard(MetricsWriter(tmp_path / "m.jsonl", rank=0), **kw)


def test_nan_and_inf_are_caught_even_during_warmup(tmp_path: Path) -> None:
    guard = _guard(tmp_path, warmup=100)
    assert guard.check(1, float("nan")).verdict is Verdict.NAN
    assert guard.check(2, float("inf")).verdict is Verdict.NAN


def test_a_spike_over_ratio_times_ema_after_warmup_asks_for_rollback(tmp_path: Path) -> None:
    guard = _guard(tmp_path, ratio=2.0, warmup=3)
    for step in range(1, 4):
        assert not guard.check(step, 1.0).rollback
    decision = guard.check(4, 2.5)
    assert decision.rollback and decision.verdict is Verdict.SPIKE
    assert not guard.check(5, 1.9).rollback


def test_no_spike_verdict_before_warmup(tmp_path: Path) -> None:
    guard = _guard(tmp_path, ratio=2.0, warmup=3)
    guard.check(1, 1.0)
    assert not guard.check(2, 50.0).rollback


def test_a_spike_does_not_move_the_ema(tmp_path: Path) -> None:
    guard = _guard(tmp_path, warmup=0)
    guard.check(1, 1.0)
    guard.check(2, 100.0)
    assert guard.ema == 1.0


def test_metrics_lines_carry_step_loss_time_event_rank(tmp_path: Path) -> None:
    guard = _guard(tmp_path, warmup=0)
    guard.check(1, 2.0, data="abc")
    guard.check(2, float("nan"))
    lines = read_metrics(tmp_path / "m.jsonl")
    assert [(x["step"], x["event"], x["rank"]) for x in lines] == [(1, "step", 0), (2, "nan", 0)]
    assert lines[0]["loss"] == 2.0 and lines[0]["data"] == "abc" and lines[0]["time"] > 0
    assert lines[1]["loss"] is None and lines[1]["loss_str"] == "nan"
    for raw in (tmp_path / "m.jsonl").read_text().splitlines():
        json.loads(raw, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))


def test_rollback_exits_with_train_rollback(tmp_path: Path) -> None:
    guard = _guard(tmp_path)
    decision = guard.check(1, float("nan"))
    with pytest.raises(SystemExit) as exc:
        guard.rollback(decision)
    assert exc.value.code == exitcodes.TRAIN_ROLLBACK == 75


def test_guard_state_round_trips(tmp_path: Path) -> None:
    a = _guard(tmp_path, warmup=2)
    for step, loss in enumerate([3.0, 2.0, 1.5], start=1):
        a.check(step, loss)
    b = _guard(tmp_path, warmup=2)
    b.load_state_dict(a.state_dict())
    assert (b.ema, b.seen) == (a.ema, a.seen)
    assert b.check(4, 10.0).rollback


@pytest.mark.parametrize("kw", [{"ratio": 1.0}, {"ema_beta": 1.0}, {"warmup": -1}])
def test_bad_settings_are_rejected(tmp_path: Path, kw: dict) -> None:
    with pytest.raises(ValueError):
        _guard(tmp_path, **kw)
