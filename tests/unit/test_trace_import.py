"""`sacme import-trace`: every column, both timezone styles, string ids, bad rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from slurm_acme.errors import InputError
from slurm_acme.ingest.trace import import_trace
from slurm_acme.store.schema.core import jobs

SEREN = """job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time
5001,alice,2,16,128,Pretrain,COMPLETED,2023-07-01 08:00:00+08:00,2023-07-01 08:10:00+08:00,2023-07-01 10:10:00+08:00,7200,600,115200
5002,bob,0,0,4,Other,FAILED,2023-07-02 00:00:05+08:00,2023-07-02 00:00:05+08:00,2023-07-02 00:01:05+08:00,60,0,0
5003,carol,1,1,8,Eval,CANCELLED,2023-07-03 12:00:00+08:00,,2023-07-03 12:30:00+08:00,0,1800,0
"""

KALOS = """job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time,mem_per_pod_GB,shared_mem_per_pod,fail_time,stop_time
dlc1a2b3c,dave,4,32,512,SFT,NODE_FAIL,2023-07-05 00:00:00+00:00,2023-07-05 00:00:30+00:00,2023-07-05 01:00:30+00:00,3600,30,115200,256.5,64,2023-07-05 01:00:30+00:00,2023-07-05 01:00:31+00:00
dlc9z,erin,1,8,64,MLLM,TIMEOUT,2023-07-06 23:59:59+00:00,2023-07-07 00:00:00+00:00,2023-07-07 04:00:00+00:00,14400,1,115200,128,0,,2023-07-07 04:00:00+00:00
"""

@pytest.fixture(autouse=True, params=["columnar", "rows"])
def lane(request, monkeypatch):  # type: ignore[no-untyped-def]
    """Every test on both lanes: pyarrow's columnar one and the row-by-row one
    an install without the ``fast`` extra takes."""
    from slurm_acme.ingest import trace

    monkeypatch.setattr(trace, "COLUMNAR", request.param == "columnar")
    if request.param == "columnar" and not trace.columnar_lane():
        pytest.skip("pyarrow (the fast extra) is not installed")
    return request.param


# 2023-07-01T00:00:00Z, computed by hand.
JULY_1_UTC = 1688169600.0


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def rows_by_id(store) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    with store.engine.connect() as conn:
        return {r.job_id: r._asdict() for r in conn.execute(select(jobs))}


def test_seren_row_imports_every_column_with_utc_times(store, tmp_path):
    result = import_trace(store, write(tmp_path, "trace_seren.csv", SEREN), cluster="seren")
    assert (result.rows, result.skipped) == (3, 0)
    row = rows_by_id(store)["5001"]
    assert row["cluster"] == "seren" and row["user"] == "alice"
    assert (row["nodes"], row["gpus"], row["cpus"]) == (2, 16, 128)
    assert (row["workload_type"], row["state"]) == ("Pretrain", "COMPLETED")
    # 08:00 at +08:00 is midnight UTC.
    assert row["submit_ts"] == JULY_1_UTC
    assert row["start_ts"] == JULY_1_UTC + 600
    assert row["end_ts"] == JULY_1_UTC + 600 + 7200
    assert (row["duration_s"], row["queue_s"], row["gpu_time_s"]) == (7200, 600, 115200)
    assert row["source"] == "trace:trace_seren.csv"
    assert row["mem_per_pod_gb"] is None and row["fail_ts"] is None


def test_empty_start_time_is_null(store, tmp_path):
    import_trace(store, write(tmp_path, "t.csv", SEREN), cluster="seren")
    assert rows_by_id(store)["5003"]["start_ts"] is None


def test_kalos_string_ids_and_extra_columns(store, tmp_path):
    result = import_trace(store, write(tmp_path, "trace_kalos.csv", KALOS), cluster="kalos")
    assert result.rows == 2
    rows = rows_by_id(store)
    row = rows["dlc1a2b3c"]
    assert row["submit_ts"] == JULY_1_UTC + 4 * 86400
    assert (row["mem_per_pod_gb"], row["shared_mem_per_pod"]) == (256.5, 64)
    assert row["fail_ts"] == JULY_1_UTC + 4 * 86400 + 3630
    assert row["stop_ts"] == row["fail_ts"] + 1
    assert rows["dlc9z"]["fail_ts"] is None
    assert rows["dlc9z"]["submit_ts"] == JULY_1_UTC + 6 * 86400 - 1


def test_both_timezone_styles_agree_on_the_same_instant(store, tmp_path):
    plus8 = SEREN.splitlines()[0] + "\n1,u,1,1,1,Debug,COMPLETED,2023-07-01 08:00:00+08:00,,,0,0,0\n"
    utc = SEREN.splitlines()[0] + "\n2,u,1,1,1,Debug,COMPLETED,2023-07-01T00:00:00+00:00,,,0,0,0\n"
    naive = SEREN.splitlines()[0] + "\n3,u,1,1,1,Debug,COMPLETED,2023-07-01 00:00:00,,,0,0,0\n"
    for i, text in enumerate((plus8, utc, naive)):
        import_trace(store, write(tmp_path, f"t{i}.csv", text), cluster="c")
    rows = rows_by_id(store)
    assert rows["1"]["submit_ts"] == rows["2"]["submit_ts"] == rows["3"]["submit_ts"] == JULY_1_UTC


def test_reimport_is_idempotent_and_updates(store, tmp_path):
    path = write(tmp_path, "t.csv", SEREN)
    import_trace(store, path, cluster="seren")
    path.write_text(SEREN.replace("alice", "alice2"))
    import_trace(store, path, cluster="seren")
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(jobs)).scalar() == 3
    assert rows_by_id(store)["5001"]["user"] == "alice2"


def test_same_job_id_in_two_clusters_is_two_jobs(store, tmp_path):
    path = write(tmp_path, "t.csv", SEREN)
    import_trace(store, path, cluster="a")
    import_trace(store, path, cluster="b")
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(jobs)).scalar() == 6


BAD = SEREN + """5004,dan,two,1,1,Eval,COMPLETED,2023-07-01 08:00:00+08:00,,,0,0,0
5005,dan,1,1,1,Training,COMPLETED,2023-07-01 08:00:00+08:00,,,0,0,0
5006,dan,1,1,1,Eval,COMPLETED,2023-13-01 08:00:00+08:00,,,0,0,0
5007,dan,1,1
"""


def test_bad_rows_are_skipped_and_named(store, tmp_path):
    result = import_trace(store, write(tmp_path, "bad.csv", BAD), cluster="s")
    assert (result.rows, result.skipped) == (3, 4)
    messages = [str(b) for b in result.bad]
    assert "bad.csv:5: column 'node_num'" in messages[0] and "'two'" in messages[0]
    assert "bad.csv:6: column 'type'" in messages[1] and "Training" in messages[1]
    assert "bad.csv:7: column 'submit_time'" in messages[2]
    assert "bad.csv:8:" in messages[3] and "expected 13 fields, found 4" in messages[3]


def test_strict_aborts_and_writes_nothing(store, tmp_path):
    with pytest.raises(InputError, match=r"bad.csv:5: column 'node_num'.*nothing imported"):
        import_trace(store, write(tmp_path, "bad.csv", BAD), cluster="s", strict=True, batch_size=1)
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(jobs)).scalar() == 0


def test_unknown_column_is_rejected_by_name(store, tmp_path):
    text = SEREN.replace("gpu_time", "gpu_time,colour", 1)
    with pytest.raises(InputError, match=r"u.csv:1: unknown column\(s\) 'colour'"):
        import_trace(store, write(tmp_path, "u.csv", text), cluster="s")


def test_missing_column_is_rejected_by_name(store, tmp_path):
    text = "job_id,user\n1,a\n"
    with pytest.raises(InputError, match=r"missing column\(s\) 'node_num'"):
        import_trace(store, write(tmp_path, "m.csv", text), cluster="s")


def test_empty_and_missing_files(store, tmp_path):
    with pytest.raises(InputError, match="empty file"):
        import_trace(store, write(tmp_path, "e.csv", ""), cluster="s")
    with pytest.raises(InputError, match="no such file"):
        import_trace(store, tmp_path / "nope.csv", cluster="s")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_acme", *args], capture_output=True, text=True, check=False)


def test_cli_unknown_column_is_one_line_exit_2(tmp_path, sqlite_url):
    path = write(tmp_path, "u.csv", SEREN.replace("gpu_time", "gpu_time,colour", 1))
    proc = run_cli("--db", sqlite_url, "import-trace", str(path), "--cluster", "s")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "unknown column(s) 'colour'" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_reports_skipped_rows_and_json(tmp_path, sqlite_url):
    import json

    proc = run_cli("--db", sqlite_url, "import-trace", str(write(tmp_path, "bad.csv", BAD)),
                   "--cluster", "s", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["skipped"] == 4
    assert "bad.csv:5: column 'node_num'" in proc.stderr


def test_cli_unreachable_database_is_exit_2(tmp_path):
    path = write(tmp_path, "t.csv", SEREN)
    proc = run_cli("--db", "postgresql://nobody@127.0.0.1:1/none", "import-trace", str(path), "--cluster", "s")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    try:
        import psycopg  # noqa: F401  (the postgres extra)
    except ImportError:  # without the driver the one line says which extra to install
        assert "slurm-acme[postgres]" in proc.stderr
    else:
        assert "unreachable" in proc.stderr


HEADER = SEREN.splitlines()[0].split(",")
GOOD = "9,u,1,8,16,Eval,COMPLETED,2023-07-01 08:00:00+08:00,2023-07-01 08:00:10+08:00,2023-07-01 08:01:10+08:00,60,10,480".split(",")


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("job_id", ""),
        ("node_num", "-1"),
        ("gpu_num", "8.5"),
        ("cpu_num", "1e3"),
        ("duration", "1e5"),
        ("queue", "1.2.3"),
        ("gpu_time", "nan"),
        ("state", "completed"),
        ("submit_time", "2023-02-31 08:00:00+08:00"),
        ("start_time", "2023-07-01 24:00:00+08:00"),
        ("end_time", "12345"),
        ("end_time", "2023-07-01 08:00:00 +08:00"),
    ],
)
def test_each_rule_rejects_the_same_values_on_every_backend(store, tmp_path, column, value):
    record = list(GOOD)
    record[HEADER.index(column)] = value
    other = ["10", *GOOD[1:]]
    path = write(tmp_path, "one.csv", ",".join(HEADER) + "\n" + ",".join(record) + "\n" + ",".join(other) + "\n")
    result = import_trace(store, path, cluster="s")
    assert (result.rows, result.skipped) == (1, 1)
    assert result.bad[0].column == column and result.bad[0].line == 2


def test_fractional_seconds_are_kept(store, tmp_path):
    record = list(GOOD)
    record[HEADER.index("submit_time")] = "2023-07-01 08:00:00.250+08:00"
    import_trace(store, write(tmp_path, "f.csv", ",".join(HEADER) + "\n" + ",".join(record) + "\n"), cluster="s")
    assert rows_by_id(store)["9"]["submit_ts"] == JULY_1_UTC + 0.25


# -- hostile values (issue 12): the same bad rows on both backends, never a traceback --

def one_bad_row_file(tmp_path: Path, column: str, value: str) -> Path:
    record = list(GOOD)
    record[HEADER.index(column)] = value
    other = ["10", *GOOD[1:]]
    text = ",".join(HEADER) + "\n" + ",".join(record) + "\n" + ",".join(other) + "\n"
    path = tmp_path / "hostile.csv"
    path.write_bytes(text.encode())
    return path


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("user", "ev\x00il", "contains a NUL byte"),
        ("job_id", "9\x00", "contains a NUL byte"),
        ("gpu_num", "1" * 25, "out of range (at most 2147483647)"),
        ("node_num", "2147483648", "out of range (at most 2147483647)"),
        ("end_time", "2023-07-01 08:00:05+08:00", "end_time is before start_time"),
        ("end_time", "2023-07-01 00:00:05+00:00", "end_time is before start_time"),  # written in UTC
    ],
)
def test_hostile_values_are_bad_rows_on_every_backend(store, tmp_path, column, value, reason):
    result = import_trace(store, one_bad_row_file(tmp_path, column, value), cluster="s")
    assert (result.rows, result.skipped) == (1, 1)
    assert (result.bad[0].column, result.bad[0].line, result.bad[0].reason) == (column, 2, reason)
    stored = rows_by_id(store)
    assert list(stored) == ["10"]  # the hostile row is not in the store, clamped or otherwise
    assert "\x00" not in stored["10"]["user"]


def test_the_largest_integer_and_an_end_equal_to_start_are_kept(store, tmp_path):
    record = list(GOOD)
    record[HEADER.index("cpu_num")] = "2147483647"
    record[HEADER.index("end_time")] = record[HEADER.index("start_time")]
    path = write(tmp_path, "edge.csv", ",".join(HEADER) + "\n" + ",".join(record) + "\n")
    result = import_trace(store, path, cluster="s")
    assert (result.rows, result.skipped) == (1, 0)
    assert rows_by_id(store)["9"]["cpus"] == 2147483647


def test_a_leading_byte_order_mark_is_accepted(store, tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + SEREN.encode())
    result = import_trace(store, path, cluster="seren")
    assert (result.rows, result.skipped) == (3, 0)
    assert sorted(rows_by_id(store)) == ["5001", "5002", "5003"]


def test_a_huge_field_is_named_on_its_own_line_and_nothing_lands(store, tmp_path):
    lines = SEREN.splitlines()
    huge = lines[3].replace("carol", "c" * (10 << 20))  # a 10 MB field on file line 4
    path = write(tmp_path, "huge.csv", "\n".join([*lines[:3], huge]) + "\n")
    with pytest.raises(InputError, match=r"huge\.csv:4: unreadable CSV"):
        import_trace(store, path, cluster="seren")
    assert rows_by_id(store) == {}


def test_cli_nul_and_overflow_are_one_line_each_exit_0_with_the_rest_imported(tmp_path, store):
    path = tmp_path / "t.csv"
    text = SEREN.replace("bob", "b\x00b").replace(",128,", ",1" + "0" * 24 + ",")
    path.write_bytes(text.encode())
    proc = run_cli("--db", store.url, "import-trace", str(path), "--cluster", "s")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    out = proc.stdout + proc.stderr
    assert "t.csv:2: column 'cpu_num': out of range" in out and "t.csv:3: column 'user': contains a NUL byte" in out
    assert list(rows_by_id(store)) == ["5003"]


def _parts(store) -> dict[float, tuple[int, float]]:  # type: ignore[no-untyped-def]
    from slurm_acme.store.schema.report import report_rollup_parts as parts

    with store.engine.connect() as conn:
        return {r.month_ts: (r.jobs, r.built_ts) for r in conn.execute(select(parts).where(parts.c.cluster == "seren"))}


SEREN_HEADER = SEREN.splitlines()[0]
MARCH, APRIL, MAY = 1677628800.0, 1680307200.0, 1682899200.0  # 2023-03-01, -04-01, -05-01 UTC


def _job(job_id: str, day: str) -> str:
    return f"{job_id},alice,1,8,64,SFT,COMPLETED,{day} 12:00:00+00:00,{day} 12:00:00+00:00,{day} 13:00:00+00:00,3600,0,28800"


def test_an_import_rebuilds_only_the_months_it_wrote_to_or_moved_jobs_out_of(store, tmp_path):
    first = write(tmp_path, "a.csv", "\n".join([SEREN_HEADER, _job("1", "2023-03-10"), _job("2", "2023-04-10"),
                                                _job("3", "2023-05-10")]) + "\n")
    assert import_trace(store, first, cluster="seren").months_rebuilt == 3
    before = _parts(store)
    assert {m: n for m, (n, _t) in before.items()} == {MARCH: 1, APRIL: 1, MAY: 1}
    # job 1 moves from March to May; April is untouched
    moved = write(tmp_path, "b.csv", "\n".join([SEREN_HEADER, _job("1", "2023-05-20")]) + "\n")
    assert import_trace(store, moved, cluster="seren").months_rebuilt == 2
    after = _parts(store)
    assert after[APRIL] == before[APRIL]
    assert (after[MARCH][0], after[MAY][0]) == (0, 2)
