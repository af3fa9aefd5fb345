"""``sacme diagnose``: output, storage, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from slurm_acme.cli.main import sacme
from slurm_acme.store import failures as db
from slurm_acme.store import open_store

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "diagnose"


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(sacme, list(args), catch_exceptions=False)


def test_json_prints_one_object_per_log_with_the_issue_keys(tmp_path, store_url):
    result = run("--db", store_url, "diagnose", str(FIXTURES / "injected_nccl.log"),
                 str(FIXTURES / "keyerror_multirank.log"), "--json", "--job-id", "42")
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["category"] for r in rows] == ["NetworkError", "KeyError"]
    for key in ("category", "origin", "action", "node", "rule_id", "confidence", "evidence"):
        assert key in rows[0]
    assert rows[0]["node"] == "node2"
    store = open_store(store_url)
    try:
        stored = db.list_failures(store, job_id="42")
    finally:
        store.dispose()
    assert sorted(r.category for r in stored) == ["KeyError", "NetworkError"]
    assert all(r.log_path and r.log_path.endswith(".log") for r in stored)


def test_explain_shows_rule_and_compressed_log(tmp_path):
    result = run("diagnose", "--no-store", "--explain", str(FIXTURES / "keyerror_multirank.log"))
    assert "KeyError (script) -> stop" in result.output
    assert "rule py-key-error: /KeyError(: |$)/" in result.output
    assert "compressed 8 lines to" in result.output


def test_missing_file_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "diagnose", "--no-store", str(tmp_path / "gone.log")],
                          capture_output=True, text=True, env={**os.environ, "ACME_CONF": ""}, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"sacme: error: {tmp_path / 'gone.log'}: log file not found"
    assert proc.stdout == ""


def test_empty_and_binary_logs_are_diagnosed_without_error(tmp_path):
    from slurm_acme.diagnose.api import conclude, scan_file

    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    binary = tmp_path / "bin.log"
    binary.write_bytes(bytes(range(256)) * 4000 + b"\n\xff\xfeKeyError: '\xe9'\n")
    result = run("diagnose", "--no-store", "--json", str(empty))
    assert json.loads(result.output)["category"] == "unknown"
    # The reader streams binary content without error; the CLI refuses a file that starts
    # binary as "not a text log" (tests/unit/test_diagnose_not_text.py).
    assert conclude(scan_file(str(binary))).category == "KeyError"


def test_dash_reads_the_log_from_stdin():
    result = CliRunner().invoke(sacme, ["diagnose", "--no-store", "--json", "-"],
                                input="step 1\nRuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    assert json.loads(result.output)["category"] == "ECCError"
