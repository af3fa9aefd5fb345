"""``sacme import-trace``: stream an AcmeTrace job trace (CSV) into the store.

The file is read once and written inside a single transaction, so an import
either lands whole or not at all (``--strict``), and a re-run of the same file
changes nothing (rows are upserted on ``(cluster, job_id)``). Timestamps carry
their own offset (Seren ``+08:00``, Kalos ``+00:00``) and are stored as UTC
epoch seconds.

Each column has a *kind* (``COLUMNS``) that says how it is checked and
converted; this module owns those rules and applies them row by row
(:class:`RowConverter`). With pyarrow installed (the ``fast`` extra) imports
take the columnar lane (:mod:`slurm_acme.ingest.columnar`), which decides
whole batches at once and hands every value it is not sure of to the same
converters, naming bad rows with the same words (:func:`describe_problem`).
Without it, this module's row lane imports on either backend.
"""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_acme.errors import InputError
from slurm_acme.report.model import WORKLOAD_TYPES

if TYPE_CHECKING:
    from slurm_acme.ingest.columnar import ColumnarTrace
    from slurm_acme.store import Store

#: Final states a trace row may carry (Slurm's terminal job states).
TRACE_STATES = (
    "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
    "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
)


@dataclass(frozen=True)
class Column:
    """One trace column: its name, the ``jobs`` field it fills, and its kind.

    Kinds: ``key`` (non-empty text), ``text``, ``int`` (ASCII digits, empty is
    0), ``num`` (decimal digits with an optional fraction, empty is NULL),
    ``time`` (ISO-8601 ``YYYY-MM-DD HH:MM:SS[.f][+HH:MM]``, naive is UTC,
    empty is NULL) and ``enum`` (one of ``choices``).
    """

    name: str
    target: str
    kind: str
    required: bool = True
    choices: tuple[str, ...] = ()


COLUMNS: tuple[Column, ...] = (
    Column("job_id", "job_id", "key"),
    Column("user", "user", "text"),
    Column("node_num", "nodes", "int"),
    Column("gpu_num", "gpus", "int"),
    Column("cpu_num", "cpus", "int"),
    Column("type", "workload_type", "enum", choices=WORKLOAD_TYPES),
    Column("state", "state", "enum", choices=TRACE_STATES),
    Column("submit_time", "submit_ts", "time"),
    Column("start_time", "start_ts", "time"),
    Column("end_time", "end_ts", "time"),
    Column("duration", "duration_s", "num"),
    Column("queue", "queue_s", "num"),
    Column("gpu_time", "gpu_time_s", "num"),
    # Kalos only:
    Column("mem_per_pod_GB", "mem_per_pod_gb", "num", required=False),
    Column("shared_mem_per_pod", "shared_mem_per_pod", "num", required=False),
    Column("fail_time", "fail_ts", "time", required=False),
    Column("stop_time", "stop_ts", "time", required=False),
)
REQUIRED_COLUMNS = tuple(c.name for c in COLUMNS if c.required)
OPTIONAL_COLUMNS = tuple(c.name for c in COLUMNS if not c.required)

_KIND_NAMES = {"int": "an integer", "num": "a number", "time": "an ISO-8601 timestamp"}

#: The largest integer a trace may carry: the store's INTEGER columns are 32-bit
#: on Postgres, and both backends must reject the same values.
INT_MAX = 2**31 - 1
#: The two columns whose order is checked across the row (end before start is a bad row).
ORDERED_TIMES = ("start_time", "end_time")


@dataclass(frozen=True)
class BadRow:
    """One rejected row: where it is and what was wrong."""

    path: str
    line: int
    column: str
    value: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: column {self.column!r}: {self.reason} (got {self.value!r})"


def misshapen_row(path: str, line: int, record: list[str], width: int) -> BadRow:
    """A record with the wrong number of fields, in the words both lanes use."""
    return BadRow(path, line, "*", ",".join(record)[:80], f"expected {width} fields, found {len(record)}")


def describe_problem(column: Column, value: str) -> str:
    """Why ``value`` is not acceptable in ``column`` (the same words on every path)."""
    if "\x00" in value:
        return "contains a NUL byte"
    if column.kind == "key":
        return "empty job id"
    if column.kind == "enum":
        return f"unknown {column.name}, expected one of {', '.join(column.choices)}"
    if column.kind == "int" and value.isascii() and value.isdigit():
        return f"out of range (at most {INT_MAX})"
    if column.name == ORDERED_TIMES[1] and _is_time(value):
        return f"{ORDERED_TIMES[1]} is before {ORDERED_TIMES[0]}"
    return f"not {_KIND_NAMES[column.kind]}"


def _is_time(value: str) -> bool:
    try:
        return to_epoch(value) is not None
    except ValueError:
        return False


@dataclass
class ImportResult:
    path: str
    cluster: str
    rows: int = 0
    skipped: int = 0
    seconds: float = 0.0
    #: The first bad rows, for the report (all are counted in ``skipped``).
    bad: list[BadRow] = field(default_factory=list)
    #: Report rollup partitions (cluster-months) rebuilt after the import.
    months_rebuilt: int = 0

    def to_json(self) -> dict:
        return {
            "path": self.path, "cluster": self.cluster, "rows": self.rows,
            "skipped": self.skipped, "seconds": round(self.seconds, 3),
            "bad": [str(b) for b in self.bad], "months_rebuilt": self.months_rebuilt,
        }


# -- row-by-row conversion (the Postgres path, and the reference rules) --------

_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)\Z")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}"
                        r"(?:\.[0-9]+)?(?:[+-][0-9]{2}:[0-9]{2}|Z)?\Z")


def _to_int(value: str) -> int:
    if not value:
        return 0
    if not (value.isascii() and value.isdigit()):
        raise ValueError(value)
    number = int(value)  # a digit string past Python's 4300-digit limit raises ValueError too
    if number > INT_MAX:
        raise ValueError(value)
    return number


def _to_text(value: str) -> str:
    if "\x00" in value:  # Postgres refuses NUL in text; SQLite would store it silently
        raise ValueError(value)
    return value


def _to_num(value: str) -> float | None:
    if not value:
        return None
    if not _NUMBER.match(value):
        raise ValueError(value)
    return float(value)


def to_epoch(value: str) -> float | None:
    """ISO-8601 (offset optional, naive is UTC) -> UTC epoch seconds."""
    if not value:
        return None
    if not _TIMESTAMP.match(value):
        raise ValueError(value)
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _converter(column: Column) -> Callable[[str], object]:
    if column.kind == "key":
        def key(value: str) -> str:
            if not value or "\x00" in value:
                raise ValueError(value)
            return value
        return key
    if column.kind == "enum":
        allowed = frozenset(column.choices)

        def enum(value: str) -> str:
            if value not in allowed:
                raise ValueError(value)
            return value
        return enum
    converters: dict[str, Callable[[str], object]] = {"text": _to_text, "int": _to_int, "num": _to_num,
                                                      "time": to_epoch}
    return converters[column.kind]


def check_header(header: list[str], path: str) -> list[Column | None]:
    """The :class:`Column` of each header position; unknown or missing columns are errors."""
    names = [h.strip() for h in header]
    by_name = {c.name: c for c in COLUMNS}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise InputError(
            f"{path}:1: unknown column(s) {', '.join(map(repr, unknown))}; "
            f"an AcmeTrace file has {', '.join(c.name for c in COLUMNS)}"
        )
    missing = [n for n in REQUIRED_COLUMNS if n not in names]
    if missing:
        raise InputError(f"{path}:1: missing column(s) {', '.join(map(repr, missing))}")
    if len(set(names)) != len(names):
        raise InputError(f"{path}:1: duplicate column names in header")
    return [by_name[n] for n in names]


class RowConverter:
    """CSV record -> tuple of ``targets`` values, or the first bad column."""

    def __init__(self, columns: list[Column | None], path: str):
        self.path = path
        self.columns = columns
        self.targets = tuple(c.target for c in columns if c is not None)
        self._plan = [(i, c, _converter(c)) for i, c in enumerate(columns) if c is not None]
        # end_time before start_time is a bad row: (value index of start, of end, CSV position of end, its column)
        self._order: tuple[int, int, int, Column] | None = None
        used = {c.name: (k, i, c) for k, (i, c, _f) in enumerate(self._plan)}
        if all(n in used for n in ORDERED_TIMES):
            (start_at, _, _), (end_at, end_position, end_column) = (used[n] for n in ORDERED_TIMES)
            self._order = (start_at, end_at, end_position, end_column)

    def convert(self, record: list[str], line: int) -> tuple | BadRow:
        values = []
        for i, column, convert in self._plan:
            try:
                values.append(convert(record[i]))
            except (ValueError, OverflowError):
                return BadRow(self.path, line, column.name, record[i], describe_problem(column, record[i]))
        if self._order is not None:
            start_at, end_at, end_position, end_column = self._order
            start, end = values[start_at], values[end_at]
            if isinstance(start, float) and isinstance(end, float) and end < start:
                value = record[end_position]
                return BadRow(self.path, line, end_column.name, value, describe_problem(end_column, value))
        return tuple(values)


# -- reading the file ------------------------------------------------------------

class CountingReader(io.RawIOBase):
    """A raw file wrapper that counts bytes read: a cheap progress bar, and where the
    columnar lane's byte offsets come from."""

    def __init__(self, raw: io.RawIOBase | io.BufferedReader):
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        n = self.raw.readinto(buffer)
        self.count += n or 0
        return n or 0


class TraceFile:
    """An open trace: its checked header, a ``csv.reader`` and bytes read so far."""

    def __init__(self, path: Path):
        self.path = path
        try:
            raw = open(path, "rb")
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory, expected an AcmeTrace CSV") from None
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror}") from None
        self._raw = raw
        self._counter = CountingReader(raw)
        text = io.TextIOWrapper(io.BufferedReader(self._counter, 1 << 20), encoding="utf-8-sig", newline="")
        self.reader = csv.reader(text)
        #: The file line the record being read starts on (a bad record is named by it).
        self.record_line = 1
        try:
            header = next(self.reader)
        except StopIteration:
            self.close()
            raise InputError(f"{path}: empty file, expected an AcmeTrace CSV header") from None
        except (UnicodeDecodeError, csv.Error) as exc:
            self.close()
            raise InputError(f"{path}:1: not a CSV file ({exc})") from None
        try:
            self.columns = check_header(header, str(path))
        except InputError:
            self.close()
            raise
        self.width = len(header)
        self.size = path.stat().st_size

    @property
    def bytes_read(self) -> int:
        return self._counter.count

    def __iter__(self) -> Iterator[list[str]]:
        """The records after the header, keeping :attr:`record_line` (csv's
        ``line_num`` has already moved past a record that fails to parse)."""
        reader = self.reader
        while True:
            self.record_line = reader.line_num + 1
            try:
                yield next(reader)
            except StopIteration:
                return

    def unreadable(self, exc: Exception) -> InputError:
        return InputError(f"{self.path}:{self.record_line}: unreadable CSV ({exc})")

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> TraceFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- importing ---------------------------------------------------------------------

@dataclass
class _Run:
    """Counters and limits shared by both import paths."""

    trace: TraceFile | ColumnarTrace  # either lane's reader: path, width, size, bytes_read
    result: ImportResult
    strict: bool
    max_reported: int
    progress: Callable[[int, int], None] | None

    def bad(self, row: BadRow) -> None:
        if self.strict:
            raise InputError(f"{row} (--strict: nothing imported)")
        self.result.skipped += 1
        if len(self.result.bad) < self.max_reported:
            self.result.bad.append(row)

    def wrong_width(self, record: list[str], line: int) -> BadRow:
        return misshapen_row(str(self.trace.path), line, record, self.trace.width)

    def tick(self) -> None:
        if self.progress:
            self.progress(self.trace.bytes_read, self.trace.size)


#: Whether imports take the columnar lane (:mod:`slurm_acme.ingest.columnar`) when
#: pyarrow is installed; tests turn it off to exercise the row lane.
COLUMNAR = True


def columnar_lane() -> bool:
    """True when the columnar lane is on and its libraries (the ``fast`` extra) import."""
    if not COLUMNAR:
        return False
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


def import_trace(
    store: Store,
    path: str | Path,
    *,
    cluster: str,
    strict: bool = False,
    batch_size: int = 50_000,
    max_reported: int = 20,
    progress: Callable[[int, int], None] | None = None,
) -> ImportResult:
    """Import one AcmeTrace CSV into ``store``; return counts and bad rows.

    With ``strict`` the first bad row aborts the import and nothing is
    written; otherwise bad rows are skipped and counted.
    """
    path = Path(path)
    if not cluster:
        raise InputError("--cluster: a cluster name is required")
    started = time.perf_counter()
    if columnar_lane():
        from slurm_acme.ingest.columnar import RowLaneOnly, import_columnar

        try:
            result = import_columnar(store, path, cluster=cluster, strict=strict, batch_size=batch_size,
                                     max_reported=max_reported, progress=progress)
        except RowLaneOnly:
            pass
        else:
            result.seconds = time.perf_counter() - started
            return result
    with TraceFile(path) as trace:
        run = _Run(trace, ImportResult(path=str(path), cluster=cluster), strict, max_reported, progress)
        days = _import_converted(store, run, cluster=cluster, source=f"trace:{path.name}", batch_size=batch_size)
    from slurm_acme.store.report import refresh_job_rollups

    # sacme report's monthly rollups follow every import: the months it wrote to or moved jobs out of
    run.result.months_rebuilt = refresh_job_rollups(
        store, [{"cluster": cluster, "submit_ts": day * 86400.0} for day in sorted(days)])
    if progress:
        progress(run.trace.size, run.trace.size)
    run.result.seconds = time.perf_counter() - started
    return run.result


def _import_converted(store: Store, run: _Run, *, cluster: str, source: str, batch_size: int) -> set[int]:
    """Rows are checked and converted here and streamed to the store.
    Returns the UTC days the import touched."""
    from slurm_acme.store.job_import import TraceWriter

    trace = run.trace
    assert isinstance(trace, TraceFile)
    converter = RowConverter(trace.columns, str(trace.path))
    with TraceWriter(store, cluster=cluster, source=source, fields=converter.targets) as writer:
        batch: list[tuple] = []
        try:
            for record in trace:
                if len(record) != trace.width:
                    if record:
                        run.bad(run.wrong_width(record, trace.reader.line_num))
                    continue
                row = converter.convert(record, trace.reader.line_num)
                if isinstance(row, BadRow):
                    run.bad(row)
                    continue
                batch.append(row)
                if len(batch) >= batch_size:
                    writer.write(batch)
                    run.result.rows += len(batch)
                    batch = []
                    run.tick()
        except (UnicodeDecodeError, csv.Error) as exc:
            raise trace.unreadable(exc) from None
        writer.write(batch)
        run.result.rows += len(batch)
    return writer.touched_days
