"""run_slurm: the boundary, exercised with fake binaries on PATH."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurm_acme.errors import AcmeError
from slurm_acme.slurm import SlurmError, SlurmUnavailable, run_slurm


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """Write an executable ``name`` with a shell ``body`` first on PATH."""
    def make(name: str, body: str) -> Path:
        path = tmp_path / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return make


def test_returns_stdout(fake_bin):
    fake_bin("squeue", 'echo "hello $1"')
    assert run_slurm(["squeue", "--json"], timeout=5) == "hello --json\n"


def test_failure_carries_argv_returncode_and_stderr(fake_bin):
    fake_bin("scontrol", 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    with pytest.raises(SlurmError) as err:
        run_slurm(["scontrol", "show", "job", "9"], timeout=5)
    assert not isinstance(err.value, SlurmUnavailable)
    assert err.value.argv == ("scontrol", "show", "job", "9")
    assert err.value.returncode == 1
    assert "Invalid job id specified" in err.value.stderr
    assert "Invalid job id specified" in str(err.value)


def test_unreachable_controller_is_unavailable(fake_bin):
    fake_bin("squeue", 'echo "squeue: error: Unable to contact slurm controller (connect failure)" >&2; exit 1')
    with pytest.raises(SlurmUnavailable) as err:
        run_slurm(["squeue"], timeout=5)
    assert err.value.exit_code == 2 and isinstance(err.value, AcmeError)


def test_missing_binary_is_unavailable(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmUnavailable, match="not found"):
        run_slurm(["sacct", "--json"], timeout=5)


def test_timeout_is_unavailable(fake_bin):
    fake_bin("sinfo", "sleep 5")
    with pytest.raises(SlurmUnavailable, match="no answer"):
        run_slurm(["sinfo"], timeout=0.3)


@pytest.mark.parametrize("hostile", ["a b", "a'; echo x", 'a"=0"', "$(touch pwned)", "--json"])
def test_arguments_reach_the_binary_verbatim(fake_bin, tmp_path, hostile):
    fake_bin("sbatch", 'for a in "$@"; do printf "%s\\n" "$a"; done')
    out = run_slurm(["sbatch", "-J", hostile], timeout=5)
    assert out.splitlines() == ["-J", hostile]
    assert not (tmp_path / "pwned").exists()


def test_env_is_added_to_the_environment(fake_bin):
    fake_bin("sbatch", 'echo "$ACME_X|$PATH"')
    out = run_slurm(["sbatch"], timeout=5, env={"ACME_X": "1"})
    assert out.startswith("1|") and len(out) > 4
