"""Raw-sample retention: whole UTC days go, rollups stay; Postgres keeps raw
samples in day partitions (dropped whole) with only the unique key indexed;
SQLite deletes in bounded batches."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from slurm_acme.store import telemetry as tstore
from slurm_acme.store.rollup_rows import rebuild_from_samples
from slurm_acme.store.schema.telemetry import cluster_hourly

DAY0 = 1_688_169_600.0  # 2023-07-01 00:00 UTC


def rows(days: int, per_day: int) -> tuple[list[dict], list[dict]]:
    gpu, node = [], []
    for d in range(days):
        for i in range(per_day):
            ts = DAY0 + d * 86400 + i * 600.0
            node.append({"cluster": "c", "node": "n1", "ts": ts, "cpu_percent": 10.0 + d, "node_power_w": 900.0})
            gpu.append({"cluster": "c", "node": "n1", "ts": ts, "gpu_index": 0, "util_percent": 50.0 + d,
                        "power_w": 300.0, "mem_used_bytes": 1.0, "mem_total_bytes": 4.0})
    return gpu, node


def load(store, days: int = 3, per_day: int = 6) -> None:
    gpu, node = rows(days, per_day)
    with store.engine.begin() as conn:
        tstore.insert_ignore(conn, tstore.gpu_samples, gpu, tstore.GPU_KEY)
        tstore.insert_ignore(conn, tstore.node_samples, node, tstore.NODE_KEY)
    rebuild_from_samples(store)


def rollups(store) -> list:
    with store.engine.connect() as conn:
        return sorted(tuple(r) for r in conn.execute(cluster_hourly.select()))


def test_retention_drops_whole_days_and_keeps_rollups(store):
    load(store)
    before = rollups(store)
    result = tstore.prune_raw(store, DAY0 + 2 * 86400 + 3600)  # mid-day 3: days 1 and 2 go
    assert result.rows == 2 * 6 * 2 and result.before_ts == DAY0 + 2 * 86400
    with store.engine.connect() as conn:
        left = [r[0] for r in conn.execute(text("SELECT ts FROM gpu_samples ORDER BY ts"))]
    assert len(left) == 6 and min(left) >= DAY0 + 2 * 86400
    assert rollups(store) == before  # rollups are kept indefinitely


def test_sqlite_retention_runs_in_bounded_batches(sqlite_url):
    from slurm_acme.store import open_store

    store = open_store(sqlite_url)
    load(store)
    first = tstore.prune_raw(store, DAY0 + 3 * 86400, batch=5, max_batches=1)
    assert first.rows == 5 + 5  # one batch per table, no more
    rest = tstore.prune_raw(store, DAY0 + 3 * 86400, batch=5)
    assert first.rows + rest.rows == 2 * 18
    store.dispose()


@pytest.mark.postgres
def test_postgres_raw_samples_live_in_day_partitions_with_only_the_key_indexed(pg_url):
    from slurm_acme.store import open_store

    store = open_store(pg_url)
    load(store)
    with store.engine.connect() as conn:
        parts = sorted(r[0] for r in conn.execute(text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'gpu_samples'")))
        indexes = [r[0] for r in conn.execute(text(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'gpu_samples_d20230702'"))]
    assert parts == ["gpu_samples_d20230701", "gpu_samples_d20230702", "gpu_samples_d20230703"]
    assert len(indexes) == 1 and "UNIQUE" in indexes[0] and "(cluster, node, ts, gpu_index)" in indexes[0]
    result = tstore.prune_raw(store, DAY0 + 86400)
    assert (result.partitions, result.rows) == (2, 12)  # day 1 of both raw tables
    with store.engine.connect() as conn:
        left = conn.execute(text("SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent "
                                 "WHERE p.relname = 'gpu_samples'")).scalar()
    assert left == 2
    store.dispose()


@pytest.mark.postgres
def test_postgres_copy_keeps_every_value_exactly_and_sends_odd_values_as_text(pg_url):
    """Binary COPY stores the spool's values bit for bit (NULLs, awkward
    floats, text with tabs); a value its column's binary dumper cannot pack
    sends that batch as text COPY; a re-sent batch lands once."""
    from slurm_acme.store import open_store

    store = open_store(pg_url)
    cols = ["cluster", "node", "ts", "gpu_index", "job_id", "util_percent", "sm_active", "power_w", "flags"]
    awkward = [0.1, 1 / 3, 1e-300, 2.0**60 + 1024, -0.0, 123456.789012345678]
    sent = [("c", "n\t1", DAY0 + i, i % 8, None if i % 2 else f"j\\{i}", v, None, v * 3, "a,b\nc")
            for i, v in enumerate(awkward)]
    odd = [("c", "n2", DAY0 + 1.5, 0, "j", "42.5", None, 7, None)]  # a string in a float column
    with store.engine.begin() as conn:
        tstore.insert_ignore_tuples(conn, tstore.gpu_samples, cols, sent, tstore.GPU_KEY)
    with store.engine.begin() as conn:  # re-sent after a crash, with the odd row
        tstore.insert_ignore_tuples(conn, tstore.gpu_samples, cols, sent + odd, tstore.GPU_KEY)
    with store.engine.connect() as conn:
        got = [tuple(r) for r in conn.execute(text(
            f"SELECT {', '.join(cols)} FROM gpu_samples ORDER BY node, ts"))]
    assert got[:len(sent)] == sent
    assert [repr(r[5]) for r in got[:len(sent)]] == [repr(v) for v in awkward]  # -0.0 and all digits
    assert got[len(sent):] == [("c", "n2", DAY0 + 1.5, 0, "j", 42.5, None, 7.0, None)]
    store.dispose()
