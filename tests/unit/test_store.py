"""The store: opening, migrations, upserts and meta facts, on SQLite and Postgres."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, inspect, select

from slurm_acme.errors import StoreUnavailable
from slurm_acme.store import open_store
from slurm_acme.store.engine import normalise_url, resolve_url
from slurm_acme.store.migrate import LATEST, MIGRATIONS, current_version, upgrade
from slurm_acme.store.rows import get_meta, set_meta, upsert
from slurm_acme.store.schema import metadata
from slurm_acme.store.schema.core import jobs


def test_new_store_has_every_table_at_latest_version(store):
    names = set(inspect(store.engine).get_table_names())
    assert set(metadata.tables) <= names
    with store.engine.connect() as conn:
        assert current_version(conn) == LATEST == MIGRATIONS[-1].version


def test_upgrade_is_idempotent(store):
    assert upgrade(store) == LATEST
    assert upgrade(store) == LATEST


def test_reopening_keeps_data(store_url):
    first = open_store(store_url)
    with first.engine.begin() as conn:
        set_meta(conn, "k", "v")
    first.dispose()
    second = open_store(store_url)
    with second.engine.connect() as conn:
        assert get_meta(conn, "k") == "v"
    second.dispose()


def test_meta_set_overwrites(store):
    with store.engine.begin() as conn:
        set_meta(conn, "watermark", "1")
        set_meta(conn, "watermark", "2")
    with store.engine.connect() as conn:
        assert get_meta(conn, "watermark") == "2"
        assert get_meta(conn, "absent") is None


def _job(job_id: str, **extra):  # type: ignore[no-untyped-def]
    return {"cluster": "c", "job_id": job_id, "state": "COMPLETED", "gpus": 8, **extra}


def test_upsert_inserts_then_updates_on_key(store):
    with store.engine.begin() as conn:
        upsert(conn, jobs, [_job("1"), _job("2")], ["cluster", "job_id"])
        upsert(conn, jobs, [_job("2", state="FAILED")], ["cluster", "job_id"])
    with store.engine.connect() as conn:
        rows = dict(conn.execute(select(jobs.c.job_id, jobs.c.state)).all())
    assert rows == {"1": "COMPLETED", "2": "FAILED"}


def test_upsert_with_empty_update_ignores_duplicates(store):
    with store.engine.begin() as conn:
        upsert(conn, jobs, [_job("1")], ["cluster", "job_id"])
        upsert(conn, jobs, [_job("1", state="FAILED")], ["cluster", "job_id"], update=())
        count = conn.execute(select(func.count()).select_from(jobs)).scalar()
        state = conn.execute(select(jobs.c.state)).scalar()
    assert (count, state) == (1, "COMPLETED")


def test_job_defaults_apply_on_the_server(store):
    with store.engine.begin() as conn:
        conn.execute(jobs.insert().values(cluster="c", job_id="9", state="FAILED"))
        row = conn.execute(select(jobs)).one()
    assert (row.workload_type, row.nodes, row.restarts, row.source) == ("Other", 0, 0, "sacct")


def test_concurrent_writers_lose_nothing(store):
    """Collectors and ingest write at once; WAL + busy timeout (or Postgres) must serialise them."""
    errors: list[BaseException] = []

    def writer(prefix: str) -> None:
        try:
            for i in range(50):
                with store.engine.begin() as conn:
                    upsert(conn, jobs, [_job(f"{prefix}{i}")], ["cluster", "job_id"])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(p,)) for p in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(jobs)).scalar() == 200


def test_unreachable_postgres_is_a_one_line_error():
    with pytest.raises(StoreUnavailable, match=r"127.0.0.1:1.* is unreachable") as info:
        open_store("postgresql://nobody@127.0.0.1:1/none")
    assert "\n" not in str(info.value)


def test_a_server_lost_during_the_schema_check_is_unreachable_too(sqlite_url, monkeypatch):
    """The probe answered, then the server went away (an admin's pg_terminate_backend,
    a restart): the caller gets the same one-line StoreUnavailable, not a SQLAlchemy
    error it cannot name (the node collector retries on StoreUnavailable)."""
    from sqlalchemy.exc import OperationalError

    import slurm_acme.store.migrate as migrate

    def terminated(store):  # type: ignore[no-untyped-def]
        raise OperationalError("SELECT version FROM acme_meta", {},
                               Exception("terminating connection due to administrator command\nSSL..."))

    monkeypatch.setattr(migrate, "upgrade", terminated)
    with pytest.raises(StoreUnavailable, match=r"is unreachable: terminating connection due to administrator command$"):
        open_store(sqlite_url)


def test_password_is_hidden_in_errors():
    with pytest.raises(StoreUnavailable) as info:
        open_store("postgresql://u:s3cret@127.0.0.1:1/none")
    assert "s3cret" not in str(info.value)


def test_malformed_url_is_rejected():
    with pytest.raises(StoreUnavailable, match="not a valid"):
        open_store("::nonsense::")


def test_unknown_driver_is_rejected():
    with pytest.raises(StoreUnavailable, match="'nosuchdb' is not supported"):
        open_store("nosuchdb://x/y")


def test_sqlite_folder_that_cannot_exist(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreUnavailable, match="cannot create its folder"):
        open_store(f"sqlite:///{blocker}/sub/acme.db")


def test_sqlite_runs_in_wal_mode(sqlite_url):
    store = open_store(sqlite_url)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() > 0
    store.dispose()


def test_newer_schema_than_code_is_refused(store):
    with store.engine.begin() as conn:
        set_meta(conn, "schema_version", str(LATEST + 1))
    with pytest.raises(StoreUnavailable, match="newer than this slurm-acme"):
        upgrade(store)


def test_url_resolution_order(monkeypatch):
    monkeypatch.setenv("ACME_DB", "sqlite:///env.db")
    assert resolve_url("sqlite:///flag.db", "sqlite:///conf.db") == "sqlite:///flag.db"
    assert resolve_url(None, "sqlite:///conf.db") == "sqlite:///env.db"
    monkeypatch.delenv("ACME_DB")
    assert resolve_url(None, "sqlite:///conf.db") == "sqlite:///conf.db"


def test_postgres_urls_use_psycopg3():
    assert normalise_url("postgres://h/db") == "postgresql+psycopg://h/db"
    assert normalise_url("postgresql://h/db") == "postgresql+psycopg://h/db"
    assert normalise_url("sqlite:///x.db") == "sqlite:///x.db"
