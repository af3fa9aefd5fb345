"""Arrow tables into a real Postgres COPY: binary (pgpq) and CSV give the same rows,
each value cast to its column's type; a type outside the mapping is sent as CSV."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
psycopg = pytest.importorskip("psycopg")

from slurm_acme.store.pg_copy import CopyEncoder, binary_available  # noqa: E402

TABLE = """CREATE TABLE copy_target (cluster varchar(64), job_id varchar(64), nodes integer, jobs bigint,
           submit_ts double precision, note text)"""
NAMES = ["cluster", "job_id", "nodes", "jobs", "submit_ts", "note"]


def batch(offset: int):  # type: ignore[no-untyped-def]
    return pa.table({
        "cluster": ["seren"] * 4, "job_id": [str(offset + k) for k in range(4)],
        "nodes": pa.array([1, 0, 2_000_000_000, 7], pa.int64()), "jobs": pa.array([2**40, 0, -1, 5], pa.int64()),
        "submit_ts": [1.6e9, None, 0.1 + 0.2, 5e-324], "note": ["ü", "", None, "tab\tand\nnewline, \"quoted\""],
    })


def load(url: str, binary: bool) -> tuple[bool, list[tuple]]:
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute(TABLE)
        encoder = CopyEncoder(cur, "copy_target", NAMES, binary=binary)
        with cur.copy(encoder.sql) as copy:
            copy.write(encoder.header())
            for k in range(3):
                copy.write(encoder.batch(batch(10 * k)))
            copy.write(encoder.trailer())
        cur.execute(f"SELECT {', '.join(NAMES)} FROM copy_target ORDER BY job_id::integer")
        rows = cur.fetchall()
        conn.rollback()
    return encoder.binary, rows


@pytest.mark.skipif(not binary_available(), reason="pgpq (the fast extra) is not installed")
def test_binary_and_csv_copies_store_the_same_values(pg_url):
    binary, by_binary = load(pg_url, True)
    text, by_csv = load(pg_url, False)
    assert binary and not text
    assert by_binary == by_csv and len(by_binary) == 12
    sent = batch(0).to_pylist()
    assert by_binary[:4] == [tuple(row.values()) for row in sent]  # exact doubles, NULLs, text as sent
    assert by_binary[2][4] == 0.1 + 0.2 and by_binary[1][4] is None and by_binary[2][5] is None


def test_a_column_type_outside_the_mapping_is_sent_as_csv(pg_url):
    with psycopg.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE odd (at timestamptz, n integer)")
        encoder = CopyEncoder(cur, "odd", ["at", "n"], binary=True)
        assert not encoder.binary and "FORMAT csv" in encoder.sql
        with cur.copy(encoder.sql) as copy:
            copy.write(encoder.header())
            copy.write(encoder.batch(pa.table({"at": ["2023-07-01 00:00:00+00"], "n": [3]})))
            copy.write(encoder.trailer())
        cur.execute("SELECT extract(epoch FROM at), n FROM odd")
        assert cur.fetchall() == [(1688169600, 3)]
        conn.rollback()
