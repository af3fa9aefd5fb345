"""Fixtures shared by every test: a fresh store on SQLite and on Postgres.

Store tests take the ``store`` fixture and so run once per backend. Postgres
is the real server at ``ACME_TEST_PG_URL`` (default: the machine's local one);
each test gets its own throw-away database. Every test that reaches Postgres is
marked ``postgres`` (here, not by hand), so ``make test-unit`` can run the rest
with no daemon at all (``-m "not postgres"``) while ``make test`` runs them all.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

PG_ADMIN_URL = os.environ.get("ACME_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_admin_connection():  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A brand-new Postgres database, dropped after the test."""
    name = f"acme_t_{uuid.uuid4().hex[:12]}"
    with _pg_admin_connection() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with _pg_admin_connection() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_url(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return f"sqlite:///{tmp_path / 'acme.db'}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that takes a Postgres database, directly or through a fixture."""
    for item in items:
        if "pg_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request) -> str:  # type: ignore[no-untyped-def]
    """The URL of an empty store, once per backend."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture
def store(store_url):  # type: ignore[no-untyped-def]
    from slurm_acme.store import open_store

    opened = open_store(store_url)
    yield opened
    opened.dispose()
