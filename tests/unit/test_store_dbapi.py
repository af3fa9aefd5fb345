"""The store's plain-SQL door (``Store.reading`` / ``Store.writing``), on both backends.

The commands people wait on read and write through it without SQLAlchemy; the
rest of the store writes through SQLAlchemy. Both must see one database, one
transaction must be all or nothing, and a dropped Postgres connection must not
fail the next query of a long-lived process.
"""

from __future__ import annotations

import sys

import pytest

from slurm_acme.errors import StoreError
from slurm_acme.store import engine as store_engine
from slurm_acme.store import failures as failure_store
from slurm_acme.store import nodes as ledger
from slurm_acme.store import open_store
from slurm_acme.store import runs as run_store


def test_plain_sql_and_sqlalchemy_see_the_same_rows(store):
    run_store.create_run(store, run_id="r1", name="train", cluster="c", user="ada", spec="{}",
                         workdir="/w", created_ts=10.0, job_id="7")  # SQLAlchemy
    run_store.start_attempt(store, run_id="r1", attempt=1, job_id="7", nodelist="n1", start_ts=11.0)
    failure_id = failure_store.record_failure(  # plain SQL
        store, {"category": "NetworkError", "origin": "infrastructure", "node": "n1", "evidence": ["x"]},
        cluster="c", job_id="7", run_id="r1", attempt=1, ts=12.0)
    run_store.end_attempt(store, run_id="r1", attempt=1, job_id="7", end_ts=13.0, outcome="requeue",
                          failure_id=failure_id)
    run = run_store.find_run(store, "7")
    assert run is not None and (run.run_id, run.user, run.created_ts) == ("r1", "ada", 10.0)
    [attempt] = run_store.list_attempts(store, "r1")
    assert (attempt.failure_id, attempt.outcome, attempt.nodelist) == (failure_id, "requeue", "n1")
    assert run_store.get_failures(store, [failure_id])[failure_id].evidence == ("x",)
    [event] = ledger.list_events(store)  # read by SQLAlchemy, written by plain SQL
    assert (event.node, event.failure_id, event.category) == ("n1", failure_id, "NetworkError")


def test_a_name_lookup_of_one_user_never_finds_another_users_run(store):
    for run_id, user, ts in (("mine", "ada", 1.0), ("theirs", "bob", 2.0)):
        run_store.create_run(store, run_id=run_id, name="same", cluster="c", user=user, spec="{}",
                             workdir=None, created_ts=ts)
    assert run_store.find_run(store, "same", user="ada").run_id == "mine"
    assert run_store.find_run(store, "same").run_id == "theirs"  # the newest, for an admin
    assert [r.run_id for r in run_store.latest_runs(store, user="ada")] == ["mine"]
    assert [r.run_id for r in run_store.latest_runs(store, limit=1)] == ["theirs"]


def test_a_failed_transaction_leaves_nothing(store):
    with pytest.raises(RuntimeError, match="midway"), store.writing() as db:
        db.insert("failures", [{"ts": 1.0, "category": "X", "origin": "unknown"}])
        raise RuntimeError("midway")
    assert failure_store.list_failures(store) == []
    with store.writing() as db:  # the connection is usable afterwards
        db.insert("failures", [{"ts": 2.0, "category": "Y", "origin": "unknown"}])
    assert [f.category for f in failure_store.list_failures(store)] == ["Y"]


def test_duplicate_ledger_events_land_once(store):
    event = ledger.NodeEvent(cluster="c", node="n1", ts=5.0, source="hardware", category="ECCError",
                             code="ecc_dbe", gpu_index=0)
    assert ledger.record_events(store, [event, event]) == 2  # sent
    ledger.record_events(store, [event])
    assert len(ledger.list_events(store)) == 1


def test_a_driver_error_is_a_store_error_naming_the_query(store):
    with pytest.raises(StoreError, match="record_events"):
        ledger.record_events(store, [ledger.NodeEvent(cluster="c", node=None, ts=1.0,  # type: ignore[arg-type]
                                                      source="health", category="X", code="")])


def test_opening_a_current_store_imports_no_sqlalchemy(store_url):
    open_store(store_url).dispose()  # create it (the migrations need SQLAlchemy)
    import subprocess

    probe = ("import sys; from slurm_acme.store import open_store, runs; s = open_store(sys.argv[1]); "
             "runs.find_run(s, 'x'); s.dispose(); "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy'))")
    done = subprocess.run([sys.executable, "-c", probe, store_url], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.postgres
def test_a_dropped_postgres_connection_is_replaced_before_the_next_query(pg_url, monkeypatch):
    import psycopg

    store = open_store(pg_url)
    try:
        with store.reading() as db:
            pid = db.scalar("SELECT pg_backend_pid()")
        with psycopg.connect(pg_url.replace("+psycopg", ""), autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        monkeypatch.setattr(store_engine, "PG_PING_AFTER_IDLE_S", 0.0)
        assert run_store.find_run(store, "nothing") is None  # no error: a new connection
        with store.reading() as db:
            assert db.scalar("SELECT pg_backend_pid()") != pid
    finally:
        store.dispose()
