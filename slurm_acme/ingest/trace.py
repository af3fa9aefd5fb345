"""``sacme import-trace``: stream an AcmeTrace job trace (CSV) into the store.

The file is read once, row by row, and written in batches inside a single
transaction, so an import either lands whole or not at all (``--strict``) and
a re-run of the same file changes nothing (rows are upserted on
``(cluster, job_id)``). Timestamps carry their own offset (Seren ``+08:00``,
Kalos ``+00:00``) and are stored as UTC epoch seconds.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from slurm_acme.errors import InputError

#: Columns of ``trace_seren.csv``; every AcmeTrace file has them.
REQUIRED_COLUMNS: tuple[str, ...] = (
    "job_id", "user", "node_num", "gpu_num", "cpu_num", "type", "state",
    "submit_time", "start_time", "end_time", "duration", "queue", "gpu_time",
)
#: Extra columns of ``trace_kalos.csv``.
OPTIONAL_COLUMNS: tuple[str, ...] = ("mem_per_pod_GB", "shared_mem_per_pod", "fail_time", "stop_time")

WORKLOAD_TYPES = frozenset({"Eval", "Pretrain", "SFT", "MLLM", "Debug", "Other"})
#: Final states a trace row may carry (Slurm's terminal job states).
TRACE_STATES = frozenset({
    "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
    "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
})

#: Columns of the rows this module yields, in order (see ``slurm_acme.store.jobs``).
ROW_FIELDS: tuple[str, ...] = (
    "job_id", "user", "nodes", "gpus", "cpus", "workload_type", "state",
    "submit_ts", "start_ts", "end_ts", "duration_s", "queue_s", "gpu_time_s",
    "mem_per_pod_gb", "shared_mem_per_pod", "fail_ts", "stop_ts",
)


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


@dataclass
class ImportResult:
    path: str
    cluster: str
    rows: int = 0
    skipped: int = 0
    seconds: float = 0.0
    #: The first bad rows, for the report (all are counted in ``skipped``).
    bad: list[BadRow] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "path": self.path, "cluster": self.cluster, "rows": self.rows,
            "skipped": self.skipped, "seconds": round(self.seconds, 3),
            "bad": [str(b) for b in self.bad],
        }


def _text(value: str) -> str:
    return value


def _int(value: str) -> int:
    return int(value) if value else 0


def _float_or_none(value: str) -> float | None:
    return float(value) if value else None


_MIDNIGHTS: dict[str, float] = {}


def _epoch(value: str) -> float | None:
    """ISO-8601 with an offset -> UTC epoch seconds; naive times are UTC.

    The common trace form ``YYYY-MM-DD HH:MM:SS+HH:MM`` is computed from a
    per-day cache (a trace spans a few hundred days); anything else goes
    through ``datetime.fromisoformat``.
    """
    if not value:
        return None
    if len(value) == 25 and value[13] == ":" and value[16] == ":" and value[10] in " T":
        key = value[:10] + value[19:]
        midnight = _MIDNIGHTS.get(key)
        if midnight is None:
            midnight = _MIDNIGHTS[key] = datetime.fromisoformat(value[:10] + "T00:00:00" + value[19:]).timestamp()
        h, m, s = int(value[11:13]), int(value[14:16]), int(value[17:19])
        if h < 24 and m < 60 and s < 60:
            return midnight + h * 3600 + m * 60 + s
        raise ValueError(value)
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _workload(value: str) -> str:
    if value not in WORKLOAD_TYPES:
        raise ValueError(f"unknown workload type, expected one of {sorted(WORKLOAD_TYPES)}")
    return value


def _state(value: str) -> str:
    if value not in TRACE_STATES:
        raise ValueError(f"unknown job state, expected one of {sorted(TRACE_STATES)}")
    return value


def _job_id(value: str) -> str:
    if not value:
        raise ValueError("empty job id")
    return value


#: output field -> (source column, converter)
_CONVERTERS: dict[str, tuple[str, Callable[[str], object]]] = {
    "job_id": ("job_id", _job_id),
    "user": ("user", _text),
    "nodes": ("node_num", _int),
    "gpus": ("gpu_num", _int),
    "cpus": ("cpu_num", _int),
    "workload_type": ("type", _workload),
    "state": ("state", _state),
    "submit_ts": ("submit_time", _epoch),
    "start_ts": ("start_time", _epoch),
    "end_ts": ("end_time", _epoch),
    "duration_s": ("duration", _float_or_none),
    "queue_s": ("queue", _float_or_none),
    "gpu_time_s": ("gpu_time", _float_or_none),
    "mem_per_pod_gb": ("mem_per_pod_GB", _float_or_none),
    "shared_mem_per_pod": ("shared_mem_per_pod", _float_or_none),
    "fail_ts": ("fail_time", _epoch),
    "stop_ts": ("stop_time", _epoch),
}


def check_header(header: list[str], path: str) -> dict[str, int]:
    """Map column name -> index; reject unknown or missing columns by name."""
    names = [h.strip() for h in header]
    known = set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(
            f"{path}:1: unknown column(s) {', '.join(map(repr, unknown))}; "
            f"an AcmeTrace file has {', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)}"
        )
    missing = [n for n in REQUIRED_COLUMNS if n not in names]
    if missing:
        raise InputError(f"{path}:1: missing column(s) {', '.join(map(repr, missing))}")
    if len(set(names)) != len(names):
        raise InputError(f"{path}:1: duplicate column names in header")
    return {name: i for i, name in enumerate(names)}


class TraceParser:
    """Turns CSV records into store rows (tuples in ``ROW_FIELDS`` order).

    The fast path converts a whole record in one go; only a record that fails
    is converted again field by field to name the bad column.
    """

    def __init__(self, header: list[str], path: str):
        self.path = path
        index = check_header(header, path)
        self.width = len(header)
        self._plan: list[tuple[str, int | None, Callable[[str], object]]] = [
            (column, index.get(column), convert) for column, convert in _CONVERTERS.values()
        ]
        self._fast = _fast_converter(index, self.width)

    def convert(self, record: list[str], line: int) -> tuple | BadRow:
        if len(record) != self.width:
            return BadRow(self.path, line, "*", ",".join(record)[:80],
                          f"expected {self.width} fields, found {len(record)}")
        try:
            return self._fast(record)
        except (ValueError, OverflowError):
            return self._explain(record, line)

    def _explain(self, record: list[str], line: int) -> BadRow:
        for column, i, convert in self._plan:
            if i is None:
                continue
            try:
                convert(record[i])
            except (ValueError, OverflowError) as exc:
                reason = str(exc) if convert in (_workload, _state, _job_id) else f"not a valid {_KIND[convert]}"
                return BadRow(self.path, line, column, record[i], reason)
        raise AssertionError("record failed conversion but no field fails")  # pragma: no cover


def _fast_converter(index: dict[str, int], width: int) -> Callable[[list[str]], tuple]:
    """A record -> row function specialised to this header's column positions.

    It does the same as the ``_CONVERTERS`` table, unrolled: a million-row
    import spends most of its time here. Absent optional columns read an
    empty string appended to the record.
    """
    pad = any(c not in index for c in OPTIONAL_COLUMNS)
    (job, user, nodes, gpus, cpus, kind, state, submit, start, end, dur, queue, gtime,
     mem, shm, fail, stop) = (index.get(col, width) for col, _conv in _CONVERTERS.values())
    types, states, epoch = WORKLOAD_TYPES, TRACE_STATES, _epoch

    def fast(r: list[str]) -> tuple:
        if pad:
            r.append("")
        if not r[job] or r[kind] not in types or r[state] not in states:
            raise ValueError("bad key field")
        return (
            r[job], r[user], int(r[nodes]) if r[nodes] else 0, int(r[gpus]) if r[gpus] else 0,
            int(r[cpus]) if r[cpus] else 0, r[kind], r[state],
            epoch(r[submit]), epoch(r[start]), epoch(r[end]),
            float(r[dur]) if r[dur] else None, float(r[queue]) if r[queue] else None,
            float(r[gtime]) if r[gtime] else None,
            float(r[mem]) if r[mem] else None, float(r[shm]) if r[shm] else None,
            epoch(r[fail]), epoch(r[stop]),
        )

    return fast


_KIND = {_int: "integer", _float_or_none: "number", _epoch: "ISO-8601 timestamp"}


class _CountingReader(io.RawIOBase):
    """A raw file wrapper that counts bytes read, for a cheap progress bar."""

    def __init__(self, raw: IO[bytes]):
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        n = self.raw.readinto(buffer)
        self.count += n or 0
        return n or 0


def iter_trace(path: Path, *, counter: list[_CountingReader] | None = None) -> tuple[TraceParser, Iterator[tuple[int, list[str]]]]:
    """Open ``path`` and return its parser and an iterator of (line, record)."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed by the generator
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    counting = _CountingReader(raw)
    if counter is not None:
        counter.append(counting)
    text = io.TextIOWrapper(io.BufferedReader(counting, 1 << 20), encoding="utf-8", newline="")
    reader = csv.reader(text)
    try:
        header = next(reader)
    except StopIteration:
        raw.close()
        raise InputError(f"{path}: empty file, expected an AcmeTrace CSV header") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raw.close()
        raise InputError(f"{path}:1: not a CSV file ({exc})") from None
    parser = TraceParser(header, str(path))

    def records() -> Iterator[tuple[int, list[str]]]:
        try:
            for record in reader:
                if record:
                    yield reader.line_num, record
        except (UnicodeDecodeError, csv.Error) as exc:
            raise InputError(f"{path}:{reader.line_num + 1}: unreadable CSV ({exc})") from None
        finally:
            raw.close()

    return parser, records()


def import_trace(
    store,  # type: ignore[no-untyped-def]
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
    from slurm_acme.store.job_import import TraceWriter

    path = Path(path)
    if not cluster:
        raise InputError("--cluster: a cluster name is required")
    counters: list[_CountingReader] = []
    parser, records = iter_trace(path, counter=counters)
    total_bytes = path.stat().st_size
    result = ImportResult(path=str(path), cluster=cluster)
    started = time.perf_counter()
    batch: list[tuple] = []
    with TraceWriter(store, cluster=cluster, source=f"trace:{path.name}", fields=ROW_FIELDS) as writer:
        for line, record in records:
            row = parser.convert(record, line)
            if isinstance(row, BadRow):
                if strict:
                    raise InputError(f"{row} (--strict: nothing imported)")
                result.skipped += 1
                if len(result.bad) < max_reported:
                    result.bad.append(row)
                continue
            batch.append(row)
            if len(batch) >= batch_size:
                writer.write(batch)
                result.rows += len(batch)
                batch = []
                if progress:
                    progress(counters[0].count, total_bytes)
        writer.write(batch)
        result.rows += len(batch)
    if progress:
        progress(total_bytes, total_bytes)
    result.seconds = time.perf_counter() - started
    return result
