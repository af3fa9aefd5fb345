"""The columnar lane of `sacme import-trace`: the same rules as the row lane,
value for value, and its bulk path (a cluster's first import) giving the same
rows and rollups as the upsert path and as the row lane. SQLite and Postgres."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

pytest.importorskip("pyarrow")

from slurm_acme.ingest import trace as trace_module
from slurm_acme.ingest.columnar import ColumnarTrace, ColumnChecker, import_columnar
from slurm_acme.ingest.trace import COLUMNS, BadRow, RowConverter, check_header, import_trace
from slurm_acme.report.synthetic import write_trace
from slurm_acme.store.schema.core import jobs
from slurm_acme.store.schema.report import ROLLUP_TABLES

HEADER = [c.name for c in COLUMNS]
GOOD = {
    "job_id": "9", "user": "u", "node_num": "1", "gpu_num": "8", "cpu_num": "16", "type": "Eval",
    "state": "COMPLETED", "submit_time": "2023-07-01 08:00:00+08:00", "start_time": "2023-07-01 08:00:10+08:00",
    "end_time": "2023-07-01 08:01:10+08:00", "duration": "60", "queue": "10", "gpu_time": "480",
    "mem_per_pod_GB": "1.5", "shared_mem_per_pod": "", "fail_time": "", "stop_time": "2023-07-01T00:01:10Z",
}
#: Values each rule must decide: edges of the fast paths and what only the reference decides.
TRICKY = {
    "int": ["", "0", "007", "999999999", "1000000000", "2147483647", "2147483648", "0000000000002", "-1", "1.0",
            " 1", "١", "1" * 30],
    "num": ["", "0", "1.", ".5", ".", "1.2.3", "1e5", "nan", "inf", "12345678901234567890.5", "1" * 400, "+1"],
    "time": ["", "2023-07-01 08:00:00", "2023-07-01T08:00:00Z", "2023-07-01 08:00:00+08:00",
             "2023-07-01 08:00:00-05:30", "2023-07-01 08:00:00.250+08:00", "2023-07-01 08:00:00.5", "2024-02-29 00:00:00",
             "2023-02-29 00:00:00", "2023-04-31 00:00:00", "2023-07-01 24:00:00", "2023-07-01 23:60:00",
             "2023-07-01 23:59:60", "0000-01-01 00:00:00", "0001-01-01 00:00:00+08:00", "2023-07-01 08:00:00+24:00",
             "2023-07-01 08:00:00+08:60", "2023-07-01 08:00:00+0800", "2023-07-01 08:00:00 +08:00",
             "2023-07-01 08:00:00.12345", "2023-07-01 08:00:00.1234Z", "2023-07-01", "12345", "2023-13-01 00:00:00"],
    "key": ["", "a", "a\x00"], "text": ["", "ü", "x\x00y"], "enum": ["", "Eval", "eval", "COMPLETED", "NODE_FAIL"],
}


def both_lanes(records: list[list[str]]) -> tuple[list, list]:
    """What the row converter and the column checker make of ``records``."""
    from slurm_acme.columns import strings

    columns = check_header(HEADER, "t.csv")
    rows = RowConverter(columns, "t.csv")
    expected = [rows.convert(r, i + 2) for i, r in enumerate(records)]
    checker = ColumnChecker(columns, "t.csv")
    import numpy as np

    raw = [strings([r[i] for r in records]) for i in range(len(HEADER))]
    table, bad, count = checker.check(raw, np.arange(2, len(records) + 2), report=len(records))
    good = iter(tuple(r.values()) for r in table.to_pylist())
    bad_by_line = {b.line: b for b in bad}
    got = [bad_by_line.get(i + 2) or next(good) for i in range(len(records))]
    assert count == len(bad)
    return expected, got


def same(expected: list, got: list) -> None:
    for e, g in zip(expected, got, strict=True):
        if isinstance(e, BadRow):
            assert isinstance(g, BadRow) and (g.column, g.line, g.value, g.reason) == (e.column, e.line, e.value, e.reason)
        else:
            assert isinstance(g, tuple) and g == pytest.approx(e, nan_ok=True) and g == e


@pytest.mark.parametrize("kind", sorted(TRICKY))
def test_every_tricky_value_is_decided_as_the_row_lane_decides_it(kind):
    names = [c.name for c in COLUMNS if c.kind == kind]
    records = []
    for name in names:
        for value in TRICKY[kind]:
            record = dict(GOOD, **{name: value})
            records.append([record[h] for h in HEADER])
    expected, got = both_lanes(records)
    same(expected, got)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.lists(st.lists(st.one_of(st.text(max_size=30), st.sampled_from([v for vs in TRICKY.values() for v in vs])),
                         min_size=len(HEADER), max_size=len(HEADER)), min_size=1, max_size=8))
def test_random_records_are_decided_as_the_row_lane_decides_them(records):
    expected, got = both_lanes(records)
    same(expected, got)


@pytest.mark.parametrize("width", [19, 20, 25])
def test_times_all_of_one_width_are_decided_as_the_row_lane_decides_them(width):
    """Every value of a column as wide: the bytes are read as a matrix, not gathered."""
    more = ["2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "2023-07-01 08:00:00X", "2023-07-01 08:00:00+",
            "1970-01-01T00:00:00Z", "2023-07-01 08:00:00+08:0x", "2023-07-01 08:00:00*08:00", "2023-07-01 08:00:00"]
    values = [v for v in TRICKY["time"] + more if len(v) == width]
    assert len(values) >= 4
    records = []
    for k, value in enumerate(values * 3):
        record = dict(GOOD, submit_time=value, start_time=values[k % len(values)], end_time=values[-1 - k % len(values)])
        records.append([record[h] for h in HEADER])
    expected, got = both_lanes(records)
    same(expected, got)


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


SEREN_HEADER = ",".join(HEADER[:13])
ROW = "{id},u,1,8,64,SFT,COMPLETED,2023-07-0{d} 12:00:00+00:00,2023-07-0{d} 12:00:00+00:00,2023-07-0{d} 13:00:00+00:00,3600,0,28800"


def test_quoted_fields_spanning_lines_keep_their_line_numbers(tmp_path):
    # a quoted user name with a newline: the csv lane reads on from that chunk, lines stay exact
    text = (SEREN_HEADER + "\r\n" + ROW.format(id=1, d=1) + "\r\n"
            + ROW.format(id=2, d=2).replace(",u,", ',"a\nb",') + "\r\n"
            + ROW.format(id=3, d=3).replace(",1,8,", ",x,8,") + "\r\n\r\n" + ROW.format(id=4, d=4) + "\r\n")
    with ColumnarTrace(write(tmp_path, "q.csv", text)) as trace:
        batches = list(trace.batches(100))
    lines = [int(x) for _raw, ln, _m in batches for x in ln]
    assert lines == [2, 4, 5, 7]


@pytest.fixture
def store_and_file(store, tmp_path):  # type: ignore[no-untyped-def]
    path = tmp_path / "trace_seren.csv"
    write_trace(path, 3000, style="seren", months=3, seed=3)
    return store, path


def rows_of(store, cluster: str) -> list[tuple]:  # type: ignore[no-untyped-def]
    cols = [c for c in jobs.c if c.name != "cluster"]
    with store.engine.connect() as conn:
        return sorted(tuple(r) for r in conn.execute(select(*cols).where(jobs.c.cluster == cluster)))


def rollups_of(store, cluster: str) -> dict[str, list[tuple]]:  # type: ignore[no-untyped-def]
    out = {}
    with store.engine.connect() as conn:
        for table in ROLLUP_TABLES:
            cols = [c for c in table.c if c.name not in ("cluster", "built_ts")]
            out[table.name] = sorted(tuple(r) for r in conn.execute(select(*cols).where(table.c.cluster == cluster)))
    return out


def test_bulk_and_upsert_and_row_lane_give_the_same_rows_and_rollups(store_and_file, monkeypatch):
    store, path = store_and_file
    bulk = import_trace(store, path, cluster="bulk")
    upsert = import_columnar(store, path, cluster="upsert", strict=True, batch_size=1000, max_reported=20,
                             progress=None, bulk=False)
    monkeypatch.setattr(trace_module, "COLUMNAR", False)
    rows = import_trace(store, path, cluster="rows", batch_size=700)
    assert bulk.rows == upsert.rows == rows.rows == 3000
    assert bulk.months_rebuilt == upsert.months_rebuilt == rows.months_rebuilt == 3
    assert rows_of(store, "bulk") == rows_of(store, "upsert") == rows_of(store, "rows")
    assert rollups_of(store, "bulk") == rollups_of(store, "upsert") == rollups_of(store, "rows")
    assert all(rollups_of(store, "bulk").values())


def test_bulk_rollups_equal_a_rebuild_from_the_job_rows(store_and_file):
    from slurm_acme.store.report import refresh_job_rollups

    store, path = store_and_file
    import_trace(store, path, cluster="seren", batch_size=1000)
    built = rollups_of(store, "seren")
    assert refresh_job_rollups(store, cluster="seren") == 3
    assert rollups_of(store, "seren") == built


def test_a_fresh_cluster_whose_file_repeats_a_job_id_keeps_its_last_copy(store, tmp_path):
    text = "\n".join([SEREN_HEADER, ROW.format(id=1, d=1), ROW.format(id=2, d=2),
                      ROW.format(id=1, d=3).replace(",u,", ",again,")]) + "\n"
    result = import_trace(store, write(tmp_path, "dup.csv", text), cluster="seren")
    assert (result.rows, result.skipped) == (3, 0)  # rows read; the store keeps one per job id
    stored = {r[0]: r for r in rows_of(store, "seren")}
    assert sorted(stored) == ["1", "2"]
    assert stored["1"][1] == "again"
    assert {n for n in rollups_of(store, "seren")["report_rollup_parts"]} == {(1688169600.0, 2)}


def test_a_second_import_into_a_cluster_takes_the_upsert_path_and_rebuilds_only_its_months(store, tmp_path):
    first = write(tmp_path, "a.csv", "\n".join([SEREN_HEADER, ROW.format(id=1, d=1), ROW.format(id=2, d=2)]) + "\n")
    second = write(tmp_path, "b.csv", "\n".join([SEREN_HEADER, ROW.format(id=2, d=5), ROW.format(id=3, d=6)]) + "\n")
    import_trace(store, first, cluster="seren")
    again = import_trace(store, second, cluster="seren")
    assert (again.rows, again.months_rebuilt) == (2, 1)
    assert [r[0] for r in rows_of(store, "seren")] == ["1", "2", "3"]
    assert rollups_of(store, "seren")["report_rollup_parts"] == [(1688169600.0, 3)]


def test_an_aborted_bulk_import_into_an_empty_store_leaves_its_index_and_no_rows(store, tmp_path):
    from sqlalchemy import inspect

    from slurm_acme.errors import InputError

    text = "\n".join([SEREN_HEADER, ROW.format(id=1, d=1), ROW.format(id=2, d=2).replace(",SFT,", ",Nope,")]) + "\n"
    with pytest.raises(InputError, match=r"bad\.csv:3: column 'type'.*nothing imported"):
        import_trace(store, write(tmp_path, "bad.csv", text), cluster="seren", strict=True)
    assert rows_of(store, "seren") == []
    assert "ix_jobs_cluster_submit" in {ix["name"] for ix in inspect(store.engine).get_indexes("jobs")}
    assert inspect(store.engine).get_pk_constraint("jobs")["constrained_columns"] == ["cluster", "job_id"]
    # and a bulk import that completes builds it again
    import_trace(store, write(tmp_path, "good.csv", "\n".join([SEREN_HEADER, ROW.format(id=1, d=1)]) + "\n"),
                 cluster="seren")
    assert "ix_jobs_cluster_submit" in {ix["name"] for ix in inspect(store.engine).get_indexes("jobs")}
    assert inspect(store.engine).get_pk_constraint("jobs")["constrained_columns"] == ["cluster", "job_id"]


def test_misshapen_rows_blank_lines_and_crlf_are_named_by_file_line(store, tmp_path):
    text = (SEREN_HEADER + "\r\n" + ROW.format(id=1, d=1) + "\r\n" + "5,u,1\r\n" + "\r\n"
            + ROW.format(id=3, d=3) + "\r\n")
    result = import_trace(store, write(tmp_path, "m.csv", text), cluster="seren")
    assert (result.rows, result.skipped) == (2, 1)
    assert "m.csv:3: column '*': expected 13 fields, found 3" in str(result.bad[0])
    assert [r[0] for r in rows_of(store, "seren")] == ["1", "3"]


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_every_line_ending_imports_the_same(store, tmp_path, ending):
    text = ending.join([SEREN_HEADER, ROW.format(id=1, d=1), ROW.format(id=2, d=2).replace(",1,8,", ",x,8,"),
                        ROW.format(id=3, d=3)]) + ending
    result = import_trace(store, write(tmp_path, "e.csv", text), cluster="seren")
    assert (result.rows, result.skipped) == (2, 1)
    assert "e.csv:3: column 'node_num'" in str(result.bad[0])
    assert [r[0] for r in rows_of(store, "seren")] == ["1", "3"]


def test_a_quoted_or_blank_header_line_is_left_to_the_row_lane(store, tmp_path):
    quoted = '"' + SEREN_HEADER.replace(",", '","') + '"\n' + ROW.format(id=1, d=1) + "\n"
    assert import_trace(store, write(tmp_path, "q.csv", quoted), cluster="seren").rows == 1
    from slurm_acme.errors import InputError

    with pytest.raises(InputError, match="empty file"):
        import_trace(store, write(tmp_path, "e.csv", ""), cluster="seren")


def test_rollups_whose_import_failed_are_rolled_back_and_the_old_ones_kept(store, tmp_path):
    """The rollups' transaction commits only once the jobs have (on Postgres they are written
    meanwhile): when before_commit raises, the month keeps what it had."""
    import pyarrow as pa

    from slurm_acme.store.column_rollups import prepare_rollups, write_rollups

    import_trace(store, write(tmp_path, "a.csv", "\n".join([SEREN_HEADER, ROW.format(id=1, d=1)]) + "\n"),
                 cluster="seren")
    before = rollups_of(store, "seren")
    july = 1688169600.0 + 2 * 86400
    kept = pa.table({"submit_ts": [july] * 3, "workload_type": ["SFT"] * 3, "gpus": [8] * 3,
                     "duration_s": [5.0, 6.0, 7.0], "queue_s": [0.0] * 3, "gpu_time_s": [40.0] * 3,
                     "state": ["COMPLETED"] * 3})

    def jobs_failed() -> None:
        raise RuntimeError("the jobs' transaction rolled back")

    with pytest.raises(RuntimeError, match="rolled back"):
        write_rollups(store, prepare_rollups("seren", [kept]), before_commit=jobs_failed)
    assert rollups_of(store, "seren") == before
    assert write_rollups(store, prepare_rollups("seren", [kept]), before_commit=lambda: None) == 1
    assert rollups_of(store, "seren")["report_rollup_parts"] == [(1688169600.0, 3)]


@pytest.mark.parametrize("blank", ["\n", "\r\n", ",,,,,,,,,,,,\n"])
def test_a_blank_or_all_empty_line_keeps_every_line_number_as_the_row_lane_does(store, tmp_path, monkeypatch, blank):
    """pyarrow reads a blank line as a record of empty fields; the columnar lane hands that
    chunk to the csv module, which skips a blank line and names a record of empty fields."""
    eol = "\r\n" if blank == "\r\n" else "\n"
    lines = [SEREN_HEADER, ROW.format(id=1, d=1), ROW.format(id=2, d=2), "x,u,1\n".rstrip("\n"),
             ROW.format(id=4, d=4)]
    text = eol.join(lines[:3]) + eol + blank + eol.join(lines[3:]) + eol
    path = write(tmp_path, "b.csv", text)
    columnar = import_trace(store, path, cluster="columnar")
    monkeypatch.setattr(trace_module, "COLUMNAR", False)
    rows = import_trace(store, path, cluster="rows")
    assert [str(b) for b in columnar.bad] == [str(b) for b in rows.bad]
    assert (columnar.rows, columnar.skipped) == (rows.rows, rows.skipped) == (3, 2 if blank.startswith(",") else 1)
    assert any(":5:" in str(b) for b in columnar.bad)  # the misshapen row after the blank line, by its line
