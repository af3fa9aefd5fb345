"""Opening the store: URL resolution, SQLite tuning, and reachability errors."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError, SQLAlchemyError

from slurm_acme.errors import StoreError, StoreUnavailable

#: How long a writer waits for SQLite's lock before failing (ms).
SQLITE_BUSY_TIMEOUT_MS = 30_000


def resolve_url(explicit: str | None, configured: str) -> str:
    """``--db`` beats ``$ACME_DB`` beats ``store.url`` from acme.toml."""
    return explicit or os.environ.get("ACME_DB") or configured


def normalise_url(url: str) -> str:
    """Let users write ``postgresql://``; we always drive psycopg 3."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    return url


def _tune_sqlite(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


_P = ParamSpec("_P")
_R = TypeVar("_R")


def sql_reason(exc: SQLAlchemyError) -> str:
    """The driver's one-line reason for a SQL error (no SQL text, no traceback)."""
    orig = getattr(exc, "orig", None)
    text_ = str(orig if orig is not None else exc).strip()
    return text_.splitlines()[0] if text_ else type(exc).__name__


def store_door(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Turn SQLAlchemy and driver errors raised by ``fn`` into :class:`StoreError`.

    Why: callers outside the store (the node collector above all) must be
    able to handle "the store failed" without importing SQLAlchemy.
    """

    @functools.wraps(fn)
    def guarded(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except SQLAlchemyError as exc:
            raise StoreError(f"store: {fn.__name__}: {sql_reason(exc)}") from exc

    return guarded


@dataclass(frozen=True)
class Store:
    """A connected store. ``engine`` is the only handle to SQL in the project."""

    url: str
    engine: Engine

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def dispose(self) -> None:
        self.engine.dispose()


def _redact(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def open_store(url: str, *, migrate: bool = True) -> Store:
    """Connect, check the database answers, and bring the schema up to date.

    Raises :class:`StoreUnavailable` with a one-line reason when the URL is
    malformed, its driver is missing, or the server does not answer.
    """
    url = normalise_url(url)
    shown = _redact(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreUnavailable(f"database URL {url!r} is not a valid SQLAlchemy URL") from None
    kwargs: dict = {"future": True}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            try:
                Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailable(f"database {shown}: cannot create its folder: {exc.strerror}") from None
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    elif parsed.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {"connect_timeout": 5}
        kwargs["pool_pre_ping"] = True
    try:
        engine = create_engine(url, **kwargs)
    except NoSuchModuleError:
        raise StoreUnavailable(f"database {shown}: no driver for this URL scheme") from None
    except ModuleNotFoundError as exc:
        raise StoreUnavailable(
            f"database {shown}: driver {exc.name!r} not installed (pip install 'slurm-acme[postgres]')"
        ) from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _tune_sqlite)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except (OperationalError, DBAPIError) as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        engine.dispose()
        raise StoreUnavailable(f"database {shown} is unreachable: {reason}") from None
    store = Store(url=url, engine=engine)
    if migrate:
        from slurm_acme.store.migrate import upgrade

        upgrade(store)
    return store
