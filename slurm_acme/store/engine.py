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

    @property
    def shown_url(self) -> str:
        """The URL with any password hidden, for messages and ``sacme db info``."""
        return self.engine.url.render_as_string(hide_password=True)

    def dispose(self) -> None:
        self.engine.dispose()


def _redact(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


#: The databases slurm-acme's schema and queries are written and tested for.
SUPPORTED_BACKENDS = ("sqlite", "postgresql")


def _tune_sqlite_readonly(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.close()


def _sqlite_path(parsed) -> Path | None:  # type: ignore[no-untyped-def]
    if not parsed.database or parsed.database == ":memory:" or parsed.database.startswith("file:"):
        return None
    return Path(parsed.database).expanduser()


def _readonly_sqlite_url(path: Path) -> tuple[str, bool]:
    """A ``mode=ro`` URI for a store this process may not write (root's 0644 store).

    Reading a WAL database needs its ``-shm`` file; when it is absent and cannot
    be created (the folder is not ours), no writer has uncheckpointed data
    (there is no ``-wal``), and the file is opened ``immutable``.
    """
    wal = path.with_name(path.name + "-wal")
    shm = path.with_name(path.name + "-shm")
    can_make_shm = os.access(path.parent, os.W_OK | os.X_OK)
    immutable = not wal.exists() and not shm.exists() and not can_make_shm
    query = "mode=ro" + ("&immutable=1" if immutable else "")
    return f"sqlite:///file:{path}?{query}&uri=true", immutable


def _prepare_sqlite(path: Path, shown: str, *, readonly: bool, group: str | None) -> str | None:
    """Create a new store private (0600 in a 0700 folder), or choose read-only access.

    Returns a replacement URL for read-only access, or None to use the URL as given.
    """
    if readonly:
        if not path.exists():
            raise StoreUnavailable(f"database {shown} does not exist (check --db / $ACME_DB / store.url)")
        if os.access(path, os.R_OK | os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK):
            return None
        if not os.access(path, os.R_OK):
            raise StoreUnavailable(f"database {shown}: permission denied (ask for read access to {path})")
        return _readonly_sqlite_url(path)[0]
    from slurm_acme.files import create_private_file, make_private_dirs

    try:
        make_private_dirs(path.parent, group)
        create_private_file(path, group)
    except OSError as exc:
        raise StoreUnavailable(f"database {shown}: cannot create its folder or file: {exc.strerror}") from None
    return None


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
    shown = _redact(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreUnavailable(f"database URL {url!r} is not a valid SQLAlchemy URL") from None
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise StoreUnavailable(f"database {shown}: {backend!r} is not supported; use sqlite:///PATH "
                               f"or postgresql://USER@HOST/DB")
    kwargs: dict = {"future": True}
    sqlite_readonly = False
    if backend == "sqlite":
        path = _sqlite_path(parsed)
        if path is not None:
            replaced = _prepare_sqlite(path, shown, readonly=readonly, group=group)
            if replaced is not None:
                url, sqlite_readonly = replaced, True
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    else:
        kwargs["connect_args"] = {"connect_timeout": 5}
        kwargs["pool_pre_ping"] = True
    try:
        engine = create_engine(url, **kwargs)
    except (NoSuchModuleError, ModuleNotFoundError) as exc:
        hint = " (pip install 'slurm-acme[postgres]')" if backend == "postgresql" else ""
        name = getattr(exc, "name", None) or str(exc)
        raise StoreUnavailable(f"database {shown}: driver {name!r} not installed{hint}") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _tune_sqlite_readonly if sqlite_readonly else _tune_sqlite)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except (OperationalError, DBAPIError) as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        engine.dispose()
        raise StoreUnavailable(f"database {shown} is unreachable: {reason}") from None
    store = Store(url=url, engine=engine)
    try:
        if sqlite_readonly:
            _require_current_schema(store, shown)
        elif migrate:
            from slurm_acme.store.migrate import upgrade

            upgrade(store)
    except SQLAlchemyError as exc:
        # The server went away between the probe and the schema check (a restart,
        # an admin's pg_terminate_backend): the same "unreachable" as a failed
        # probe, so a caller that retries (the node collector) retries.
        engine.dispose()
        raise StoreUnavailable(f"database {shown} is unreachable: {sql_reason(exc)}") from None
    return store


def _require_current_schema(store: Store, shown: str) -> None:
    from slurm_acme.store.migrate import LATEST, current_version

    with store.engine.connect() as conn:
        version = current_version(conn)
    if version != LATEST:
        store.dispose()
        what = "has no slurm-acme schema" if version == 0 else f"has schema version {version}, not {LATEST}"
        raise StoreUnavailable(f"database {shown} {what} and is read-only for you; "
                               f"its owner can run `sacme db upgrade`")
