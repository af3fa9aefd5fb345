"""examples/train_tiny_gpt.py rejects bad input with one line and exit code 2."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from slurm_acme import exitcodes

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train_tiny_gpt.py"


def _example():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("train_tiny_gpt", TRAIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def single_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "ACME_METRICS_FILE",
                "ACME_RESUME_FROM", "ACME_SKIP_STEPS", "ACME_FAULTS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ACME_CKPT_DIR", str(tmp_path / "ckpt"))


@pytest.mark.parametrize("var, value, fragment", [
    ("ACME_FAULTS", "explode:step=1", "unknown kind 'explode'"),
    ("ACME_SKIP_STEPS", "9-3", "ACME_SKIP_STEPS: '9-3'"),
])
def test_bad_fault_or_skip_env_is_a_one_line_usage_error(
        single_process: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], var: str, value: str, fragment: str) -> None:
    monkeypatch.setenv(var, value)
    assert _example().main(["--steps", "1"]) == exitcodes.USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("train_tiny_gpt: error:") and fragment in err and "\n" not in err


def test_bad_flag_values_exit_2(single_process: None) -> None:
    with pytest.raises(SystemExit) as exc:
        _example().parse_args(["--steps", "0"])
    assert exc.value.code == 2
