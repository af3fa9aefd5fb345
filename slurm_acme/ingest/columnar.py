"""The columnar lane of ``sacme import-trace``: whole batches checked at once (pyarrow, numpy).

The rules are :mod:`slurm_acme.ingest.trace`'s: a value the vectorised test
is sure of is decided here in bulk; any other value of a plausible shape
(a fraction of a second, leading zeros, an offset such as ``+08:60``) goes to
that module's row-by-row converter, so the two lanes cannot disagree. Bad
rows are named with the same words (:func:`~slurm_acme.ingest.trace.describe_problem`).

The file is read in large chunks cut at line ends. A chunk with no quote
characters, blank lines or lone carriage returns holds one record per line,
so pyarrow's CSV parser reads it and a record's file line is its index plus
the chunk's first line. From the first chunk that is not that plain, the
rest of the file goes through Python's ``csv`` module (quoted fields may span
lines), which keeps every line number and error message exact.

Needs the ``fast`` extra (pyarrow); :func:`available` says whether it is installed.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from slurm_acme.columns import from_numpy, strings, to_numpy
from slurm_acme.errors import InputError
from slurm_acme.ingest.read_ahead import ReadAhead, in_background
from slurm_acme.ingest.trace import (
    _TIMESTAMP,
    ORDERED_TIMES,
    BadRow,
    Column,
    CountingReader,
    ImportResult,
    _converter,
    _Run,
    check_header,
    describe_problem,
    misshapen_row,
)

if TYPE_CHECKING:
    from slurm_acme.store import Store
    from slurm_acme.store.column_rollups import ColumnRollups
    from slurm_acme.store.job_import import ColumnarJobWriter, PreparedBatch

#: Bytes read per chunk (about 65,000 AcmeTrace rows).
CHUNK_BYTES = 8 << 20
#: The first chunk is smaller: the store starts writing sooner (the pipeline fills faster).
FIRST_CHUNK_BYTES = 1 << 20
#: pyarrow parses a chunk in blocks of this size on its threads (half the time on two cores).
PARSE_BLOCK_BYTES = 2 << 20
_UTF8_BOM = b"\xef\xbb\xbf"


def _arrow_type(column: Column) -> pa.DataType:
    return {"int": pa.int64(), "num": pa.float64(), "time": pa.float64()}.get(column.kind, pa.string())


@dataclass
class Batch:
    """The good rows of one chunk as typed columns, and its bad rows."""

    table: pa.Table  # one column per target (``Column.target``), in header order
    #: The first bad rows in file order (at most as many as asked for).
    bad: list[BadRow]
    bad_count: int
    #: Bytes of the file consumed so far (for progress).
    bytes_read: int


# -- checks and conversions, one kind at a time -------------------------------

def _reference(column: Column, values: list[str]) -> tuple[list[Any], np.ndarray]:
    """The row-by-row rule for ``values``: converted values and a bad mask."""
    convert = _converter(column)
    out: list[Any] = []
    bad = np.zeros(len(values), dtype=bool)
    for i, value in enumerate(values):
        try:
            out.append(convert(value))
        except (ValueError, OverflowError):
            out.append(None)
            bad[i] = True
    return out, bad


def _mask(array: pa.Array) -> np.ndarray:
    """A boolean result as numpy (nulls as False)."""
    return to_numpy(array)


def _empty(array: pa.Array) -> np.ndarray:
    return to_numpy(pc.binary_length(array)) == 0


def _has_nul(array: pa.Array) -> np.ndarray:
    return _mask(pc.match_substring(array, "\x00"))


def _resolve(column: Column, array: pa.Array, unsure: np.ndarray, values: np.ndarray,
             bad: np.ndarray) -> None:
    """Decide the ``unsure`` positions with the reference rule, in place."""
    where = np.flatnonzero(unsure)
    if not len(where):
        return
    converted, rejected = _reference(column, array.take(from_numpy(where.astype(np.int64))).to_pylist())
    for k, i in enumerate(where):
        if rejected[k]:
            bad[i] = True
        else:
            values[i] = np.nan if converted[k] is None else converted[k]


def _anchored(pattern: re.Pattern[str]) -> str:
    """The RE2 form of a pattern the row lane applies with ``re.match`` (``\\Z`` at its end)."""
    assert pattern.pattern.endswith(r"\Z")
    return "^" + pattern.pattern[:-2] + "$"




def _ints(column: Column, array: pa.Array) -> tuple[pa.Array, np.ndarray]:
    n = len(array)
    lengths = to_numpy(pc.binary_length(array))
    empty = lengths == 0
    fast = ~empty & (_per_value(array, _DIGIT) == lengths)
    digits = fast.copy()
    fast &= lengths <= 9  # at most 999,999,999: below INT_MAX
    values = np.zeros(n, dtype=np.int64)
    if fast.any():
        values[fast] = to_numpy(pc.cast(array.filter(from_numpy(fast)), pa.int64()))
    bad = ~(fast | empty)
    digits &= ~fast
    bad &= ~digits
    where = np.flatnonzero(digits)
    if len(where):
        converted, rejected = _reference(column, array.take(from_numpy(where.astype(np.int64))).to_pylist())
        for k, i in enumerate(where):
            if rejected[k]:
                bad[i] = True
            else:
                values[i] = converted[k]
    return from_numpy(values), bad


_DIGIT = np.zeros(256, dtype=np.int64)
_DIGIT[ord("0"):ord("9") + 1] = 1
_DOT = np.zeros(256, dtype=np.int64)
_DOT[ord(".")] = 1


def _per_value(array: pa.Array, byte_class: np.ndarray) -> np.ndarray:
    """How many bytes of each value are in ``byte_class`` (a 0/1 table of 256)."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset:array.offset + len(array) + 1]
    data = np.frombuffer(array.buffers()[2], dtype=np.uint8) if array.buffers()[2] else np.zeros(0, np.uint8)
    running = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum(byte_class[data], out=running[1:])
    return running[offsets[1:]] - running[offsets[:-1]]


def _nums(column: Column, array: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """pyarrow's and Python's decimal-to-double conversions both round correctly,
    so every value of the rule's shape (digits, at most one dot, not the dot
    alone: :data:`~slurm_acme.ingest.trace._NUMBER`) is converted in bulk."""
    lengths = to_numpy(pc.binary_length(array))
    empty = lengths == 0
    dots = _per_value(array, _DOT)
    shaped = ~empty & (_per_value(array, _DIGIT) + dots == lengths) & (dots <= 1) & (lengths > dots)
    values = np.full(len(array), np.nan)
    bad = ~(shaped | empty)
    if shaped.any():
        values[shaped] = to_numpy(pc.cast(array.filter(from_numpy(shaped)), pa.float64()))
    return from_numpy(values, empty | bad), bad


#: Days before each month in a common year, for the fixed-position date parse.
_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def _times(column: Column, array: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """``YYYY-MM-DD[ T]HH:MM:SS`` with no offset, ``Z`` or ``±HH:MM``, checked and
    decoded with numpy at fixed positions; any other value is matched against the
    rule's pattern, and those of its shape go to the reference."""
    n = len(array)
    lengths = to_numpy(pc.binary_length(array))
    empty = lengths == 0
    values = np.full(n, np.nan)
    bad = np.zeros(n, dtype=bool)
    where = np.flatnonzero((lengths == 19) | (lengths == 20) | (lengths == 25))
    sure = np.zeros(len(where), dtype=bool)
    if len(where):
        sure, epoch = _fixed_times(array, where, lengths[where])
        values[where[sure]] = epoch[sure]
    rest = ~empty
    rest[where[sure]] = False
    others = np.flatnonzero(rest)
    if len(others):
        shaped = _mask(pc.match_substring_regex(array.take(from_numpy(others.astype(np.int64))),
                                                _anchored(_TIMESTAMP)))
        bad[others[~shaped]] = True
        unsure = np.zeros(n, dtype=bool)
        unsure[others[shaped]] = True
        _resolve(column, array, unsure, values, bad)
    return from_numpy(values, empty | bad), bad


def _fixed_times(array: pa.Array, where: np.ndarray, width: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(surely valid, UTC epoch seconds) of the values at ``where``, 19, 20 or 25 bytes long."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset:array.offset + len(array) + 1]
    data = np.frombuffer(array.buffers()[2], dtype=np.uint8)
    ok = np.ones(len(where), dtype=bool)
    same = len(where) == len(array) and bool((width == width[0]).all())
    if same:  # the usual file: every value as wide, so the bytes are a matrix (no gathering)
        matrix = data[offsets[0]:offsets[-1]].reshape(len(where), int(width[0]))
        beyond = np.zeros(len(where), dtype=np.uint8)
    else:
        starts = offsets[where]
        padded = np.concatenate([data, np.zeros(25, dtype=np.uint8)])

    def char(k: int) -> np.ndarray:
        if same:
            return matrix[:, k] if k < matrix.shape[1] else beyond
        return padded[starts + k]

    def num(a: int, b: int) -> np.ndarray:
        nonlocal ok
        high, low = char(a).astype(np.int64) - 48, char(b).astype(np.int64) - 48
        ok &= (high >= 0) & (high <= 9) & (low >= 0) & (low <= 9)
        return high * 10 + low

    for k, expected in ((4, "-"), (7, "-"), (13, ":"), (16, ":")):
        ok &= char(k) == ord(expected)
    ok &= (char(10) == ord(" ")) | (char(10) == ord("T"))
    year = num(0, 1) * 100 + num(2, 3)
    month, day, hour, minute, second = num(5, 6), num(8, 9), num(11, 12), num(14, 15), num(17, 18)
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    last_day = _DAYS_IN_MONTH[np.clip(month, 0, 12)] + ((month == 2) & leap)
    marker = char(19)
    with_offset = width == 25
    digits_before = ok.copy()
    zone_hour, zone_minute = num(20, 21), num(23, 24)
    ok = np.where(with_offset, ok & (char(22) == ord(":")) & (zone_hour <= 23) & (zone_minute <= 59)
                  & ((marker == ord("+")) | (marker == ord("-"))), digits_before)
    ok &= (width != 20) | (marker == ord("Z"))
    ok &= (month >= 1) & (month <= 12) & (year >= 1) & (day >= 1) & (day <= last_day)
    ok &= (hour <= 23) & (minute <= 59) & (second <= 59)
    zone = np.where(with_offset, np.where(marker == ord("-"), -1, 1) * (zone_hour * 3600 + zone_minute * 60), 0)
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    return ok, (days * 86400 + hour * 3600 + minute * 60 + second - zone).astype(np.float64)


def _texts(column: Column, array: pa.Array) -> tuple[pa.Array, np.ndarray]:
    if column.kind == "key":
        return array, _has_nul(array) | _empty(array)
    if column.kind == "enum":
        encoded = pc.dictionary_encode(array)
        allowed = frozenset(column.choices)
        known = np.array([v in allowed for v in encoded.dictionary.to_pylist()], dtype=bool)
        return array, ~known[to_numpy(encoded.indices)] if len(known) else np.zeros(len(array), dtype=bool)
    return array, _has_nul(array)


_KINDS: dict[str, Callable[[Column, pa.Array], tuple[pa.Array, np.ndarray]]] = {
    "int": _ints, "num": _nums, "time": _times, "key": _texts, "text": _texts, "enum": _texts,
}


class ColumnChecker:
    """Typed columns and bad rows of a batch of raw text columns (one per CSV position)."""

    def __init__(self, columns: Sequence[Column | None], path: str):
        self.columns = list(columns)
        self.path = path
        self.used = [(i, c) for i, c in enumerate(self.columns) if c is not None]
        self.schema = pa.schema([(c.target, _arrow_type(c)) for _i, c in self.used])
        names = [c.name if c is not None else None for c in self.columns]
        self._order = tuple(names.index(n) for n in ORDERED_TIMES) if all(n in names for n in ORDERED_TIMES) else None

    def check(self, raw: Sequence[pa.Array], lines: np.ndarray, report: int) -> tuple[pa.Table, list[BadRow], int]:
        """``raw[i]`` holds CSV position ``i``; ``lines`` the file line of each record.
        Returns the good rows, the first ``report`` bad rows and the number of bad rows."""
        n = len(lines)
        first_bad = np.full(n, -1, dtype=np.int64)
        typed: dict[int, pa.Array] = {}
        for i, column in reversed(self.used):
            values, bad = _KINDS[column.kind](column, raw[i])
            typed[i] = values
            first_bad[bad] = i
        if self._order is not None:
            start, end = (typed[i] for i in self._order)
            backwards = (first_bad < 0) & _mask(pc.less(end, start))
            first_bad[backwards] = self._order[1]
        bad_rows = np.flatnonzero(first_bad >= 0)
        described = []
        for k in bad_rows[:report]:
            column = self.columns[first_bad[k]]
            assert column is not None
            value = raw[first_bad[k]][k].as_py()
            described.append(BadRow(self.path, int(lines[k]), column.name, value, describe_problem(column, value)))
        table = pa.Table.from_arrays([typed[i] for i, _c in self.used], schema=self.schema)
        if len(bad_rows):
            table = table.filter(from_numpy(first_bad < 0))
        return table, described, len(bad_rows)


# -- reading ---------------------------------------------------------------------

class _Prefixed(io.RawIOBase):
    """``head`` bytes, then the rest of ``raw``: the csv lane resumes mid-file."""

    def __init__(self, head: bytes, raw: io.BufferedReader):
        self.head = memoryview(head)
        self.raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        if len(self.head):
            n = min(len(buffer), len(self.head))
            buffer[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        return self.raw.readinto(buffer) or 0


def _plain(chunk: bytes) -> bool:
    """True when no quote or NUL is in ``chunk``, so each of its lines is one record
    for pyarrow as for Python's csv module (both end a line at ``\\n``, ``\\r\\n``
    or a lone ``\\r``). Blank lines are found after parsing (:meth:`ColumnarTrace._arrow`)."""
    return b'"' not in chunk and b"\x00" not in chunk


class RowLaneOnly(Exception):
    """A file the columnar lane leaves to the row lane whole (an unusual header line)."""


class ColumnarTrace:
    """An AcmeTrace file read as batches of raw text columns with their file lines."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self._raw = open(path, "rb")
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory, expected an AcmeTrace CSV") from None
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror}") from None
        self.size = path.stat().st_size
        first = self._raw.readline()
        if first.startswith(_UTF8_BOM):
            first = first[len(_UTF8_BOM):]
        line = first.rstrip(b"\r\n")
        if not line or b'"' in line or b"\r" in line or b"\x00" in line:
            self.close()  # empty, blank, quoted or a lone CR: the row lane's reader says what it is
            raise RowLaneOnly(str(path))
        try:
            header = next(csv.reader([first.decode("utf-8").rstrip("\r\n")]))
        except (UnicodeDecodeError, csv.Error, StopIteration) as exc:
            self.close()
            raise InputError(f"{path}:1: not a CSV file ({exc})") from None
        try:
            self.columns = check_header(header, str(path))
        except InputError:
            self.close()
            raise
        self.width = len(header)
        self.bytes_read = self._raw.tell()
        self._line = 2  # the file line of the next record
        self._limit = csv.field_size_limit()

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> ColumnarTrace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def batches(self, batch_rows: int) -> Iterator[tuple[list[pa.Array], np.ndarray, list[BadRow]]]:
        """(raw columns, file lines, misshapen rows) per batch."""
        pending = b""
        size = FIRST_CHUNK_BYTES
        while True:
            data = self._raw.read(size)
            size = CHUNK_BYTES
            chunk = pending + data
            if not chunk:
                return
            cut = chunk.rfind(b"\n") + 1 if data else len(chunk)
            if cut == 0:
                pending = chunk
                continue
            chunk, pending = chunk[:cut], chunk[cut:]
            parsed = self._arrow(chunk) if _plain(chunk) else None
            if parsed is None:
                yield from self._csv_lane(chunk + pending, batch_rows)
                return
            self.bytes_read += len(chunk)
            count = len(parsed[0])
            yield parsed, np.arange(self._line, self._line + count, dtype=np.int64), []
            self._line += count

    def _arrow(self, chunk: bytes) -> list[pa.Array] | None:
        names = [f"c{i}" for i in range(self.width)]
        try:
            table = pa_csv.read_csv(
                pa.py_buffer(chunk),
                read_options=pa_csv.ReadOptions(column_names=names, use_threads=True, block_size=PARSE_BLOCK_BYTES),
                parse_options=pa_csv.ParseOptions(quote_char=False, double_quote=False, escape_char=False,
                                                  ignore_empty_lines=False),
                convert_options=pa_csv.ConvertOptions(column_types={n: pa.string() for n in names},
                                                      strings_can_be_null=False, quoted_strings_can_be_null=False),
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None  # a misshapen row or bad UTF-8: the csv lane names it
        columns = [table.column(i).combine_chunks() for i in range(self.width)]
        lengths = [to_numpy(pc.binary_length(c)) for c in columns]
        if len(table) and max(int(n.max()) for n in lengths) > self._limit:
            return None  # csv refuses a field that long; its error names the line
        line_bytes = np.zeros(len(table), dtype=np.int64)
        for n in lengths:
            line_bytes += n
        if (line_bytes == 0).any():
            # a blank line (pyarrow reads it as a record of empty fields; csv skips it), or a
            # record of only commas: the csv lane tells them apart and keeps the line numbers
            return None
        return columns

    def _csv_lane(self, head: bytes, batch_rows: int) -> Iterator[tuple[list[pa.Array], np.ndarray, list[BadRow]]]:
        counter = CountingReader(_Prefixed(head, self._raw))
        text = io.TextIOWrapper(io.BufferedReader(counter, 1 << 20), encoding="utf-8", newline="")
        reader = csv.reader(text)
        base = self._line - 1
        start = self.bytes_read
        records: list[list[str]] = []
        lines: list[int] = []
        misshapen: list[BadRow] = []
        while True:
            line = base + reader.line_num + 1
            try:
                record = next(reader)
            except StopIteration:
                break
            except (UnicodeDecodeError, csv.Error) as exc:
                raise InputError(f"{self.path}:{line}: unreadable CSV ({exc})") from None
            at = base + reader.line_num
            if len(record) == self.width:
                records.append(record)
                lines.append(at)
            elif record:
                misshapen.append(misshapen_row(str(self.path), at, record, self.width))
            if len(records) >= batch_rows or len(misshapen) >= batch_rows:
                self.bytes_read = start + counter.count
                yield _transpose(records, self.width), np.array(lines, dtype=np.int64), misshapen
                records, lines, misshapen = [], [], []
        self.bytes_read = start + counter.count
        yield _transpose(records, self.width), np.array(lines, dtype=np.int64), misshapen


def _transpose(records: list[list[str]], width: int) -> list[pa.Array]:
    if not records:
        return [strings([]) for _ in range(width)]
    return [strings(list(column)) for column in zip(*records, strict=True)]


# -- importing -----------------------------------------------------------------------

def import_columnar(store: Store, path: Path, *, cluster: str, strict: bool, batch_size: int, max_reported: int,
                    progress: Callable[[int, int], None] | None, bulk: bool = True) -> ImportResult:
    """:func:`slurm_acme.ingest.trace.import_trace` by the columnar lane.

    A cluster's first import is written in bulk and its monthly rollups are
    computed from the rows in memory; a file that repeats a job id (or a
    cluster that has jobs already) is upserted, and the months it touched are
    rebuilt from ``jobs``."""
    from slurm_acme.store.job_import import BulkConflict

    try:
        run, writer, rollups_written = _write(store, path, cluster=cluster, strict=strict, batch_size=batch_size,
                                              max_reported=max_reported, progress=progress, bulk=bulk)
    except BulkConflict:
        run, writer, rollups_written = _write(store, path, cluster=cluster, strict=strict, batch_size=batch_size,
                                              max_reported=max_reported, progress=progress, bulk=False)
    if rollups_written is not None:
        run.result.months_rebuilt = rollups_written()
    else:
        from slurm_acme.store.report import refresh_job_rollups

        run.result.months_rebuilt = refresh_job_rollups(
            store, [{"cluster": cluster, "submit_ts": day * 86400.0} for day in sorted(writer.touched_days)])
    writer.settle()
    if progress:
        progress(run.trace.size, run.trace.size)
    return run.result


def _write(store: Store, path: Path, *, cluster: str, strict: bool, batch_size: int, max_reported: int,
           progress: Callable[[int, int], None] | None,
           bulk: bool) -> tuple[_Run, ColumnarJobWriter, Callable[[], int] | None]:
    """Checks and writes the rows; for a bulk import also what writes its rollups
    (returning how many months), None when they must be rebuilt from ``jobs``.

    The rollups are computed on a thread while the store builds its indexes and
    commits. On Postgres they are written then too, in a second transaction that
    commits only once the jobs have (:func:`write_rollups`'s ``before_commit``);
    SQLite has one writer at a time, so there they are written after the commit,
    while the WAL is checkpointed."""
    from slurm_acme.store.column_rollups import prepare_rollups, write_rollups
    from slurm_acme.store.job_import import ColumnarJobWriter

    jobs_committed: Future[None] = Future()
    computed: Future[ColumnRollups | None] | None = None
    written: Future[int] | None = None
    with ColumnarTrace(path) as trace:
        run = _Run(trace, ImportResult(path=str(path), cluster=cluster), strict, max_reported, progress)
        checker = ColumnChecker(trace.columns, str(path))
        # up to max_reported bad rows described per batch: the first of the file are among them
        report = max(1 if strict else 0, max_reported)
        try:
            with ColumnarJobWriter(store, cluster=cluster, source=f"trace:{path.name}", bulk=bulk) as writer:
                def checked() -> Iterator[tuple[PreparedBatch, list[BadRow], int, list[BadRow]]]:
                    for raw, lines, misshapen in trace.batches(batch_size):
                        table, found, count = checker.check(raw, lines, report)
                        yield writer.prepare(table), found, count, misshapen

                # the next batches are read, checked and readied on a thread while this one is written
                with ReadAhead(checked(), name="acme-import-read") as batches:
                    for prepared, found, count, misshapen in batches:
                        # in file order, so --strict names the first bad row of the file
                        for row in sorted(misshapen + found, key=lambda b: b.line):
                            run.bad(row)
                        run.result.skipped += count - len(found)
                        writer.write(prepared)
                        run.result.rows += prepared.table.num_rows
                        run.tick()
                if writer.bulk:
                    kept = writer.kept
                    done = computed = in_background(lambda: prepare_rollups(cluster, kept), name="acme-import-rollups")
                    if store.dialect == "postgresql":
                        written = in_background(lambda: write_rollups(store, done.result(),
                                                                      before_commit=jobs_committed.result),
                                                name="acme-import-rollups-write")
        except BaseException as exc:
            jobs_committed.set_exception(exc)  # the rollups' transaction rolls back
            if written is not None:
                wait([written])
            raise
        jobs_committed.set_result(None)
    if written is not None:
        return run, writer, written.result
    if computed is not None:
        rollups = computed.result()
        return run, writer, lambda: write_rollups(store, rollups)
    return run, writer, None
