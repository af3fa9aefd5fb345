"""Opening the store: URL resolution, SQLite tuning, and reachability errors.

Opening imports no SQLAlchemy. The queries of the commands people wait on at a
prompt (``sacme status``, ``sacme diagnose``) run as plain SQL on a DB-API
connection (:meth:`Store.reading`, :meth:`Store.writing`); SQLAlchemy -- about
150 ms of start-up with its asyncio support -- is imported when a query first
asks for :attr:`Store.engine`. Both reach the same database with the same
settings (SQLite's WAL, busy timeout and foreign keys; Postgres as the URL's role,
so row security applies alike).
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from slurm_acme.errors import StoreError, StoreUnavailable
from slurm_acme.store.dbapi import Db

if TYPE_CHECKING:
    from sqlalchemy import Engine

#: How long a writer waits for SQLite's lock before failing (ms).
SQLITE_BUSY_TIMEOUT_MS = 30_000
#: Seconds a Postgres connection attempt may take.
PG_CONNECT_TIMEOUT_S = 5
#: A Postgres connection unused this long is pinged before its next use.
PG_PING_AFTER_IDLE_S = 10.0


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


_URL = re.compile(r"^(?P<backend>[A-Za-z][\w]*)(?:\+(?P<driver>[\w]+))?://(?P<rest>.*)$", re.DOTALL)
#: The drivers the plain-SQL path drives itself (any other goes through SQLAlchemy's pool).
_OWN_DRIVERS = {"sqlite": ("", "pysqlite"), "postgresql": ("psycopg",)}


def _tune_sqlite(dbapi_conn: Any, _record: Any = None) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _tune_sqlite_readonly(dbapi_conn: Any, _record: Any = None) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.close()


_P = ParamSpec("_P")
_R = TypeVar("_R")


def is_database_error(exc: BaseException) -> bool:
    """True for an error of SQLAlchemy or of a database driver (checked without importing either)."""
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(exc, sa_exc.SQLAlchemyError):
        return True
    if isinstance(exc, sqlite3.Error):
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.Error)


def sql_reason(exc: BaseException) -> str:
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
        except Exception as exc:
            if not is_database_error(exc):
                raise
            raise StoreError(f"store: {fn.__name__}: {sql_reason(exc)}") from exc

    return guarded


class Store:
    """A connected store: the only handle to SQL in the project.

    ``url`` is the SQLAlchemy URL :attr:`engine` is made from. ``connect`` opens
    the DB-API connection :meth:`reading` and :meth:`writing` use; None (an
    in-memory SQLite database, a driver of SQLAlchemy's choosing) borrows one
    from the engine's pool, so both always see the same database.
    """

    def __init__(self, url: str, dialect: str, *, connect: Callable[[], Any] | None,
                 engine_options: dict[str, Any], sqlite_tune: Callable[..., None] | None = None) -> None:
        self.url = url
        self.dialect = dialect
        self._connect = connect
        self._engine_options = engine_options
        self._sqlite_tune = sqlite_tune
        self._engine: Engine | None = None
        self._raw: Any = None
        self._used = 0.0
        self._lock = threading.RLock()

    @property
    def shown_url(self) -> str:
        """The URL with any password hidden, for messages and ``sacme db info``."""
        return redact(self.url)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, made (and SQLAlchemy imported) on first use."""
        if self._engine is None:
            from sqlalchemy import create_engine, event

            engine = create_engine(self.url, **self._engine_options)
            if self._sqlite_tune is not None:
                event.listen(engine, "connect", self._sqlite_tune)
            self._engine = engine
        return self._engine

    def _connection(self) -> Any:
        """The own DB-API connection (None: borrow from the engine), made on first use.

        A Postgres connection idle for :data:`PG_PING_AFTER_IDLE_S` is pinged first and
        replaced if the server dropped it (a restart, ``pg_terminate_backend``), as
        SQLAlchemy's ``pool_pre_ping`` does, so a long-lived supervisor or collector
        does not fail its next write on a dead connection."""
        if self._connect is None:
            return None
        raw = self._raw
        if raw is not None and (getattr(raw, "closed", False) or getattr(raw, "broken", False)):
            raw = None
        elif raw is not None and self.dialect == "postgresql" and \
                time.monotonic() - self._used > PG_PING_AFTER_IDLE_S:
            try:
                raw.execute("SELECT 1")
            except Exception as exc:
                if not is_database_error(exc):
                    raise
                raw.close()
                raw = None
        if raw is None:
            raw = self._raw = self._connect()
        self._used = time.monotonic()
        return raw

    def bulk_connection(self) -> Any:
        """A DB-API connection of its own, outside autocommit, for one long bulk
        write (``sacme import-trace``), which the caller commits and closes.

        Its own so the bulk transaction, its PRAGMAs and its COPY leave the store's
        shared connection alone; opened directly (no SQLAlchemy) when the store can.
        An in-memory SQLite store lends a connection of its engine's pool instead,
        the only one that sees its database."""
        if self._connect is None:
            return self.engine.raw_connection()
        raw = self._connect()
        if self.dialect == "postgresql":
            raw.autocommit = False
        return raw

    @contextmanager
    def _borrowed(self) -> Iterator[Any]:
        with self._lock:
            own = self._connection()
            if own is not None:
                yield own
                return
            pooled = self.engine.raw_connection()
            try:
                yield pooled
            finally:
                pooled.close()

    @contextmanager
    def reading(self) -> Iterator[Db]:
        """Plain SQL that only reads (each statement sees the latest commit)."""
        with self._borrowed() as raw:
            db = Db(raw, self.dialect)
            try:
                yield db
            finally:
                db.end_read()

    @contextmanager
    def writing(self) -> Iterator[Db]:
        """Plain SQL in one transaction: committed on success, rolled back on any error.
        SQLite takes its write lock at the start, so a writer waits (busy timeout)
        instead of failing when it upgrades from reading."""
        with self._borrowed() as raw:
            db = Db(raw, self.dialect)
            db.begin()
            try:
                yield db
            except BaseException:
                try:
                    db.rollback()
                except Exception as exc:  # a dead connection: nothing was committed; keep the first error
                    if not is_database_error(exc):
                        raise
                raise
            db.commit()

    def dispose(self) -> None:
        with self._lock:
            if self._raw is not None:
                try:
                    self._raw.close()
                except Exception as exc:  # a dead connection: nothing left to release
                    if not is_database_error(exc):
                        raise
                self._raw = None
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None


_PASSWORD = re.compile(r"^([\w+]+://[^:/@?#]*:)[^@/?#]*@")


def redact(url: str) -> str:
    """``url`` with any password shown as ``***`` (as SQLAlchemy renders it)."""
    return _PASSWORD.sub(r"\1***@", url)


#: The databases slurm-acme's schema and queries are written and tested for.
SUPPORTED_BACKENDS = ("sqlite", "postgresql")


def _sqlite_database(rest: str) -> str | None:
    """The path of ``sqlite:///PATH`` (relative) or ``sqlite:////PATH``; None for in-memory
    or a URL with options (SQLAlchemy's pool serves those)."""
    if "?" in rest or not rest.startswith("/"):
        return None
    database = rest[1:]
    return None if not database or database == ":memory:" or database.startswith("file:") else database


def _readonly_sqlite_uri(path: Path) -> tuple[str, bool]:
    """A ``mode=ro`` URI for a store this process may not write (root's 0644 store).

    Reading a WAL database needs its ``-shm`` file; when it is absent and cannot
    be created (the folder is not ours), no writer has uncheckpointed data
    (there is no ``-wal``), and the file is opened ``immutable``.
    """
    wal = path.with_name(path.name + "-wal")
    shm = path.with_name(path.name + "-shm")
    can_make_shm = os.access(path.parent, os.W_OK | os.X_OK)
    immutable = not wal.exists() and not shm.exists() and not can_make_shm
    return f"file:{path}?mode=ro" + ("&immutable=1" if immutable else ""), immutable


def _prepare_sqlite(path: Path, shown: str, *, readonly: bool, group: str | None) -> str | None:
    """Create a new store private (0600 in a 0700 folder), or choose read-only access.

    Returns the ``file:`` URI to open read-only, or None to open the path as given.
    """
    if readonly:
        if not path.exists():
            raise StoreUnavailable(f"database {shown} does not exist (check --db / $ACME_DB / store.url)")
        if os.access(path, os.R_OK | os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK):
            return None
        if not os.access(path, os.R_OK):
            raise StoreUnavailable(f"database {shown}: permission denied (ask for read access to {path})")
        return _readonly_sqlite_uri(path)[0]
    from slurm_acme.files import create_private_file, make_private_dirs

    try:
        make_private_dirs(path.parent, group)
        create_private_file(path, group)
    except OSError as exc:
        raise StoreUnavailable(f"database {shown}: cannot create its folder or file: {exc.strerror}") from None
    return None


def _sqlite_store(url: str, rest: str, driver: str, shown: str, *, readonly: bool,
                  group: str | None) -> tuple[Store, bool]:
    """A SQLite store, and whether it is opened read-only (a file this process may not write)."""
    database = _sqlite_database(rest)
    options: dict[str, Any] = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}}
    if database is None or driver not in _OWN_DRIVERS["sqlite"]:
        return Store(url, "sqlite", connect=None, engine_options=options, sqlite_tune=_tune_sqlite), False
    path = Path(database).expanduser()
    uri = _prepare_sqlite(path, shown, readonly=readonly, group=group)
    tune = _tune_sqlite if uri is None else _tune_sqlite_readonly
    target = str(path) if uri is None else uri

    def connect() -> sqlite3.Connection:
        raw = sqlite3.connect(target, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                              check_same_thread=False, uri=uri is not None)
        tune(raw)
        return raw

    if uri is not None:
        url = f"sqlite:///{uri}&uri=true"
    return Store(url, "sqlite", connect=connect, engine_options=options, sqlite_tune=tune), uri is not None


def _postgres_store(url: str, rest: str, driver: str, shown: str) -> Store:
    options: dict[str, Any] = {"connect_args": {"connect_timeout": PG_CONNECT_TIMEOUT_S}, "pool_pre_ping": True}
    if driver not in _OWN_DRIVERS["postgresql"]:
        return Store(url, "postgresql", connect=None, engine_options=options)
    try:
        import psycopg
    except ModuleNotFoundError:
        raise StoreUnavailable(f"database {shown}: driver 'psycopg' not installed "
                               f"(pip install 'slurm-acme[postgres]')") from None
    conninfo = f"postgresql://{rest}"

    def connect() -> Any:
        return psycopg.connect(conninfo, connect_timeout=PG_CONNECT_TIMEOUT_S, autocommit=True)

    return Store(url, "postgresql", connect=connect, engine_options=options)


def open_store(url: str, *, migrate: bool = True, readonly: bool = False, group: str | None = None) -> Store:
    """Connect, check the database answers, and bring the schema up to date.

    ``readonly`` is for commands that only read (report, status, logs, db info):
    they never create a file or folder, and a store they cannot write (a
    root-owned 0644 SQLite file) is opened read-only, its schema required to be
    current. A new SQLite store is created private (``files.group`` for ``group``).

    Raises :class:`StoreUnavailable` with a one-line reason when the URL is
    malformed, its backend unsupported or its driver missing, or the server
    does not answer.
    """
    url = normalise_url(url)
    shown = redact(url)
    match = _URL.match(url)
    if match is None:
        raise StoreUnavailable(f"database URL {url!r} is not a valid SQLAlchemy URL")
    backend, driver, rest = match["backend"], match["driver"] or "", match["rest"]
    if backend not in SUPPORTED_BACKENDS:
        raise StoreUnavailable(f"database {shown}: {backend!r} is not supported; use sqlite:///PATH "
                               f"or postgresql://USER@HOST/DB")
    sqlite_readonly = False
    if backend == "sqlite":
        store, sqlite_readonly = _sqlite_store(url, rest, driver, shown, readonly=readonly, group=group)
    else:
        store = _postgres_store(url, rest, driver, shown)
    try:
        with store.reading() as db:
            db.scalar("SELECT 1")
    except ModuleNotFoundError as exc:
        hint = " (pip install 'slurm-acme[postgres]')" if backend == "postgresql" else ""
        raise StoreUnavailable(f"database {shown}: driver {exc.name or str(exc)!r} not installed{hint}") from None
    except Exception as exc:
        if type(exc).__name__ == "NoSuchModuleError":  # SQLAlchemy knows no such driver
            raise StoreUnavailable(f"database {shown}: driver {driver!r} not installed") from None
        if type(exc).__name__ == "ArgumentError":  # a URL SQLAlchemy's pool cannot use
            raise StoreUnavailable(f"database URL {shown!r} is not a valid SQLAlchemy URL: "
                                   f"{sql_reason(exc)}") from None
        if not is_database_error(exc):
            raise
        store.dispose()
        raise StoreUnavailable(f"database {shown} is unreachable: {sql_reason(exc)}") from None
    try:
        _check_schema(store, shown, sqlite_readonly=sqlite_readonly, migrate=migrate)
    except Exception as exc:
        # The server went away between the probe and the schema check (a restart,
        # an admin's pg_terminate_backend): the same "unreachable" as a failed
        # probe, so a caller that retries (the node collector) retries.
        if not is_database_error(exc):
            store.dispose()
            raise
        store.dispose()
        raise StoreUnavailable(f"database {shown} is unreachable: {sql_reason(exc)}") from None
    return store


def _check_schema(store: Store, shown: str, *, sqlite_readonly: bool, migrate: bool) -> None:
    """Upgrade an old schema (SQLAlchemy is imported only then); a read-only store must be current."""
    from slurm_acme.store import migrate as migrations

    if sqlite_readonly:
        with store.reading() as db:
            version = migrations.stored_version(db)
        if version != migrations.LATEST:
            what = ("has no slurm-acme schema" if version == 0
                    else f"has schema version {version}, not {migrations.LATEST}")
            raise StoreUnavailable(f"database {shown} {what} and is read-only for you; "
                                   f"its owner can run `sacme db upgrade`")
    elif migrate:
        migrations.upgrade(store)
