"""The one synthetic AcmeTrace generator: files ``sacme import-trace`` takes whole, in both styles."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from slurm_acme.ingest.trace import COLUMNS, REQUIRED_COLUMNS, import_trace
from slurm_acme.report.synthetic import KALOS_TRACE_COLUMNS, TRACE_COLUMNS, write_trace
from slurm_acme.store import open_store


def header(path: Path) -> tuple[str, ...]:
    with path.open(newline="") as fh:
        return tuple(next(csv.reader(fh)))


def test_the_columns_are_the_importers_own():
    assert TRACE_COLUMNS == REQUIRED_COLUMNS
    assert set(KALOS_TRACE_COLUMNS) == {c.name for c in COLUMNS}


@pytest.mark.parametrize(("style", "columns", "offset"), [("seren", TRACE_COLUMNS, "+08:00"),
                                                           ("kalos", KALOS_TRACE_COLUMNS, "+00:00")])
def test_a_generated_trace_imports_whole_and_strict(tmp_path, sqlite_url, style, columns, offset):
    path = tmp_path / f"trace_{style}.csv"
    assert write_trace(path, 400, style=style, months=2, seed=3) == 400
    assert header(path) == columns
    with path.open(newline="") as fh:
        first = next(csv.DictReader(fh))
    assert first["submit_time"].endswith(offset) and " " in first["submit_time"]
    store = open_store(sqlite_url)
    try:
        result = import_trace(store, path, cluster=style, strict=True)
    finally:
        store.dispose()
    assert (result.rows, result.skipped) == (400, 0)


def test_the_same_seed_writes_the_same_file(tmp_path):
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    write_trace(a, 200, style="kalos", seed=7)
    write_trace(b, 200, style="kalos", seed=7)
    write_trace(c, 200, style="kalos", seed=8)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
