"""Input that is not a text log gets "not a text log", never an infrastructure verdict."""

from __future__ import annotations

import gzip
import random
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_acme.diagnose.sniff import text_problem

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"


def _sacme(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "slurm_acme", "diagnose", "--no-store", *args], input=stdin,
                          capture_output=True, check=False, timeout=300)


@pytest.mark.parametrize("kind", ["random", "gzip", "nul"])
def test_non_text_files_are_refused_without_a_verdict(tmp_path, kind):
    rng = random.Random(12)
    data = {"random": bytes(rng.getrandbits(8) for _ in range(100_000)),
            "gzip": gzip.compress((FIXTURES / "injected_nccl.log").read_bytes()),
            "nul": b"\0" * 50_000}[kind]
    path = tmp_path / "job.out"
    path.write_bytes(data)
    proc = _sacme(str(path), "--json")
    err = proc.stderr.decode()
    assert proc.returncode == 2 and proc.stdout == b""
    assert "not a text log" in err and len(err.strip().splitlines()) == 1
    assert "exclude" not in err and "CUDA" not in err


def test_non_text_on_stdin_is_refused_too():
    rng = random.Random(3)
    proc = _sacme("-", stdin=bytes(rng.getrandbits(8) for _ in range(20_000)))
    assert proc.returncode == 2 and b"not a text log" in proc.stderr


def test_real_logs_with_escapes_and_progress_bars_are_text():
    assert text_problem(b"\x1b[31mRuntimeError\x1b[0m: NCCL error\r 45%|####   | 9/20\r\n" * 200) is None
    assert text_problem("Fehler: Gerät nicht gefunden\n".encode() * 100) is None
    for path in FIXTURES.rglob("*.log"):
        assert text_problem(path.read_bytes()[:65536]) is None, path


def test_a_text_log_is_still_diagnosed():
    proc = _sacme(str(FIXTURES / "injected_nccl.log"), "--json")
    assert proc.returncode in (0, 1), proc.stderr
    assert b'"category"' in proc.stdout
