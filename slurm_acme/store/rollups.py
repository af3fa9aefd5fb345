"""The hourly rollups' storage format: fixed bins, histogram blobs, and how rows are built.

A month of a 4,704-GPU site sampled every 15 s is 813 M raw GPU samples;
reports must not read those. The store keeps, per hour,

- ``gpu_hourly``: one row per (cluster, node, GPU, hour, job), ``job_id`` ``''``
  for an idle GPU;
- ``node_hourly``: one row per (cluster, node, hour);
- ``cluster_hourly``: one row per (cluster, hour, metric), the sum of the
  first two over every node, which is what a whole-cluster report reads.

Each metric of a row has a count ``n``, a ``sum`` (exact means) and a histogram
over fixed bins (:data:`GPU_METRICS`, :data:`NODE_METRICS`). A quantile read off
a histogram is the *lower edge* of the bin holding the nearest-rank value, so
the true nearest-rank value ``x`` satisfies ``q <= x < q + width``: the error
is less than one bin (1 % for ratios, 5 W for GPU power, 1 degree C). Shares at
a bin edge (util == 0 %, memory >= 75 %) are exact.

Histograms are stored as blobs: a one-byte header (the byte width of the
integers that follow) and then ``(bin, count)`` pairs of non-empty bins,
little-endian. This module has no SQL; :mod:`slurm_acme.store.telemetry`
reads and writes the rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
else:
    class _NumpyOnFirstUse:
        """numpy, imported when a histogram is first built or read: the schema
        imports the bin specs here, and most commands (``sacme diagnose``,
        ``sacme status``) never touch a histogram."""

        def __getattr__(self, name: str) -> Any:
            import numpy

            globals()["np"] = numpy
            return getattr(numpy, name)

    np = _NumpyOnFirstUse()

HOUR_S = 3600.0


@dataclass(frozen=True)
class BinSpec:
    """One metric's bins: ``linear`` bins ``[i*width, (i+1)*width)`` (the last
    one also holds everything above), or ``log2`` bins (bin 0 holds 0, bin
    ``i >= 1`` holds ``[2**(i-1), 2**i)``)."""

    name: str
    unit: str
    bins: int
    width: float = 1.0
    scale: str = "linear"

    def index(self, values: np.ndarray) -> np.ndarray:
        """Bin index of each value (values are finite and >= 0)."""
        if self.scale == "log2":
            idx = np.zeros(values.shape, dtype=np.int64)
            pos = values >= 1
            idx[pos] = np.floor(np.log2(values[pos])).astype(np.int64) + 1
        else:
            idx = np.floor(values / self.width).astype(np.int64)
        return np.clip(idx, 0, self.bins - 1)

    def lower(self, i: int) -> float:
        if self.scale == "log2":
            return 0.0 if i == 0 else float(2 ** (i - 1))
        return i * self.width

    def upper(self, i: int) -> float:
        if self.scale == "log2":
            return float(2**i)
        return math.inf if i == self.bins - 1 else (i + 1) * self.width

    def error_bound(self) -> str:
        """The bound a quantile of this metric carries, in words."""
        if self.scale == "log2":
            return "within a factor of 2 (log2 bins)"
        return f"less than one {self.width:g} {self.unit} bin"


#: GPU metrics: utilisation %, SM active % (DCGM ratio x 100), framebuffer
#: used % of total, board power, temperature, and power of samples at 0 %
#: utilisation (the paper's idle-GPU power).
GPU_METRICS: tuple[BinSpec, ...] = (
    BinSpec("util", "%", 101),
    BinSpec("sm", "%", 101),
    BinSpec("fb", "%", 101),
    BinSpec("power", "W", 300, 5.0),
    BinSpec("temp", "C", 151),
    BinSpec("idle_power", "W", 300, 5.0),
)
#: Node metrics: CPU %, host memory %, server power, InfiniBand bytes per tick.
NODE_METRICS: tuple[BinSpec, ...] = (
    BinSpec("cpu", "%", 101),
    BinSpec("mem", "%", 101),
    BinSpec("node_power", "W", 1200, 25.0),
    BinSpec("ib_rx", "bytes", 64, scale="log2"),
    BinSpec("ib_tx", "bytes", 64, scale="log2"),
)
METRICS: dict[str, BinSpec] = {m.name: m for m in (*GPU_METRICS, *NODE_METRICS)}
#: Per cluster-hour, over the node-hours that have both GPU power and server
#: power: the sum of the node-hours' mean total GPU draw (``server_gpu_w``) and
#: of their mean server draw (``server_w``). Their ratio is the GPU share of
#: server power, read off ``cluster_hourly`` alone. One bin: ``n`` node-hours.
SERVER_METRICS: tuple[BinSpec, ...] = (BinSpec("server_gpu_w", "W", 1), BinSpec("server_w", "W", 1))

GPU_KEY = ("cluster", "node", "gpu_index", "hour_ts", "job_id")
NODE_KEY = ("cluster", "node", "hour_ts")
CLUSTER_KEY = ("cluster", "hour_ts", "metric")


def hour_of(ts: float) -> float:
    return math.floor(ts / HOUR_S) * HOUR_S


# ------------------------------------------------------------------ blobs

def encode(counts: np.ndarray) -> bytes:
    """Dense counts -> blob of the non-empty bins."""
    nz = np.flatnonzero(counts)
    if nz.size == 0:
        return b""
    values = counts[nz]
    width = 2 if int(values.max()) < 2**16 and int(nz.max()) < 2**16 else 4
    dtype = "<u2" if width == 2 else "<u4"
    if width == 4 and int(values.max()) >= 2**32:
        width, dtype = 8, "<u8"
    pairs = np.empty(2 * nz.size, dtype=dtype)
    pairs[0::2] = nz
    pairs[1::2] = values
    return bytes([width]) + pairs.tobytes()


_DTYPES = {2: "<u2", 4: "<u4", 8: "<u8"}


def decode(blob: bytes | None, bins: int) -> np.ndarray:
    """Blob -> dense int64 counts of length ``bins``."""
    out = np.zeros(bins, dtype=np.int64)
    if blob:
        pairs = np.frombuffer(blob, dtype=_DTYPES[blob[0]], offset=1).astype(np.int64)
        np.add.at(out, pairs[0::2], pairs[1::2])
    return out


def sum_blobs(parts: Iterable[tuple[bytes, int]], bins: int) -> np.ndarray:
    """Dense int64 counts of the sum of ``sign * blob`` over ``(blob, sign)``
    parts: every blob's bins and counts concatenated, then added up once
    (what :func:`decode` and ``+=`` per blob give, for a fraction of the
    numpy calls). Exact while no bin's running total passes 2**53."""
    bins_of: list[np.ndarray] = []
    counts_of: list[np.ndarray] = []
    for blob, sign in parts:
        if not blob:
            continue
        pairs = np.frombuffer(blob, dtype=_DTYPES[blob[0]], offset=1)
        bins_of.append(pairs[0::2])
        counts_of.append(pairs[1::2] if sign == 1 else -pairs[1::2].astype(np.int64))
    if not bins_of:
        return np.zeros(bins, dtype=np.int64)
    index = np.concatenate(bins_of).astype(np.intp)
    if index.size and int(index.max()) >= bins:
        raise IndexError(f"histogram bin {int(index.max())} beyond {bins} bins")
    weights = np.concatenate([c.astype(np.float64) for c in counts_of])
    return np.rint(np.bincount(index, weights=weights, minlength=bins)).astype(np.int64)


# ------------------------------------------------------------------ one metric

@dataclass
class Hist:
    """One metric's count, sum and bin counts (mutable while a row is built)."""

    spec: BinSpec
    n: int = 0
    total: float = 0.0
    counts: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.counts is None:
            self.counts = np.zeros(self.spec.bins, dtype=np.int64)

    def add(self, values: np.ndarray) -> None:
        values = values[np.isfinite(values) & (values >= 0)]
        if values.size == 0:
            return
        self.n += int(values.size)
        self.total += float(values.sum())
        assert self.counts is not None
        np.add.at(self.counts, self.spec.index(values), 1)

    def merge(self, other: Hist, sign: int = 1) -> None:
        assert self.counts is not None and other.counts is not None
        self.n += sign * other.n
        self.total += sign * other.total
        self.counts += sign * other.counts

    def columns(self) -> dict[str, Any]:
        """The row's columns for this metric."""
        assert self.counts is not None
        name = self.spec.name
        return {f"{name}_n": self.n, f"{name}_sum": self.total, f"{name}_hist": encode(self.counts)}

    @classmethod
    def from_row(cls, spec: BinSpec, row: Mapping[str, Any], prefix: str | None = None) -> Hist:
        name = prefix or spec.name
        return cls(spec, int(row.get(f"{name}_n") or 0), float(row.get(f"{name}_sum") or 0.0),
                   decode(row.get(f"{name}_hist"), spec.bins))


# ------------------------------------------------------------------ rows from samples

def _column(rows: Sequence[Mapping[str, Any]], name: str, scale: float = 1.0) -> np.ndarray:
    return np.array([np.nan if r.get(name) is None else float(r[name]) * scale for r in rows],
                    dtype=np.float64)


def gpu_metric_values(rows: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Per GPU metric, the values of ``rows`` (raw ``gpu_samples`` rows); NaN = none."""
    util = _column(rows, "util_percent")
    used, total = _column(rows, "mem_used_bytes"), _column(rows, "mem_total_bytes")
    with np.errstate(divide="ignore", invalid="ignore"):
        fb = np.where(total > 0, 100.0 * used / total, np.nan)
    power = _column(rows, "power_w")
    return {"util": util, "sm": _column(rows, "sm_active", 100.0), "fb": fb, "power": power,
            "temp": _column(rows, "temp_c"), "idle_power": np.where(util == 0, power, np.nan)}


def node_metric_values(rows: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    return {"cpu": _column(rows, "cpu_percent"), "mem": _column(rows, "mem_percent"),
            "node_power": _column(rows, "node_power_w"), "ib_rx": _column(rows, "ib_rx_bytes"),
            "ib_tx": _column(rows, "ib_tx_bytes")}


@dataclass
class RollupRow:
    """One ``gpu_hourly`` or ``node_hourly`` row being built."""

    key: tuple
    metrics: dict[str, Hist]
    samples: int = 0
    gpu_power_sum: float = 0.0
    gpu_power_ticks: int = 0

    def columns(self, key_names: Sequence[str]) -> dict[str, Any]:
        out: dict[str, Any] = dict(zip(key_names, self.key, strict=True))
        out["samples"] = self.samples
        for hist in self.metrics.values():
            out.update(hist.columns())
        if "gpu_index" not in key_names:
            out["gpu_power_sum"] = self.gpu_power_sum
            out["gpu_power_ticks"] = self.gpu_power_ticks
        return out

    @classmethod
    def from_row(cls, row: Mapping[str, Any], key_names: Sequence[str],
                 specs: Sequence[BinSpec]) -> RollupRow:
        return cls(tuple(row[k] for k in key_names), {m.name: Hist.from_row(m, row) for m in specs},
                   int(row.get("samples") or 0), float(row.get("gpu_power_sum") or 0.0),
                   int(row.get("gpu_power_ticks") or 0))

    def merge(self, other: RollupRow) -> None:
        self.samples += other.samples
        self.gpu_power_sum += other.gpu_power_sum
        self.gpu_power_ticks += other.gpu_power_ticks
        for name, hist in other.metrics.items():
            self.metrics[name].merge(hist)


def _grouped(keys: list[tuple]) -> dict[tuple, np.ndarray]:
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return {k: np.array(v, dtype=np.int64) for k, v in groups.items()}


def gpu_rollups(rows: Sequence[Mapping[str, Any]]) -> dict[tuple, RollupRow]:
    """``gpu_hourly`` rows (by key) of raw ``gpu_samples`` rows."""
    if not rows:
        return {}
    values = gpu_metric_values(rows)
    keys = [(r["cluster"], r["node"], int(r["gpu_index"]), hour_of(float(r["ts"])), r.get("job_id") or "")
            for r in rows]
    out = {}
    for key, idx in _grouped(keys).items():
        metrics = {m.name: Hist(m) for m in GPU_METRICS}
        for name, hist in metrics.items():
            hist.add(values[name][idx])
        out[key] = RollupRow(key, metrics, samples=int(idx.size))
    return out


def node_rollups(node_rows: Sequence[Mapping[str, Any]],
                 gpu_rows: Sequence[Mapping[str, Any]] = ()) -> dict[tuple, RollupRow]:
    """``node_hourly`` rows of raw ``node_samples`` rows, with the node's GPU
    power sum and the number of sample instants that had GPU power (the GPU
    share of server power divides one by the other)."""
    out: dict[tuple, RollupRow] = {}
    if node_rows:
        values = node_metric_values(node_rows)
        keys = [(r["cluster"], r["node"], hour_of(float(r["ts"]))) for r in node_rows]
        for key, idx in _grouped(keys).items():
            metrics = {m.name: Hist(m) for m in NODE_METRICS}
            for name, hist in metrics.items():
                hist.add(values[name][idx])
            out[key] = RollupRow(key, metrics, samples=int(idx.size))
    ticks: dict[tuple, set[float]] = {}
    sums: dict[tuple, float] = {}
    for r in gpu_rows:
        power = r.get("power_w")
        if power is None or not math.isfinite(float(power)) or float(power) < 0:
            continue
        key = (r["cluster"], r["node"], hour_of(float(r["ts"])))
        ticks.setdefault(key, set()).add(float(r["ts"]))
        sums[key] = sums.get(key, 0.0) + float(power)
    for key, instants in ticks.items():
        row = out.get(key)
        if row is None:
            row = out[key] = RollupRow(key, {m.name: Hist(m) for m in NODE_METRICS})
        row.gpu_power_sum += sums[key]
        row.gpu_power_ticks += len(instants)
    return out


def merge_into(target: dict[tuple, RollupRow], more: Iterable[RollupRow]) -> None:
    for row in more:
        if row.key in target:
            target[row.key].merge(row)
        else:
            target[row.key] = row


# ------------------------------------------------------------------ reading

@dataclass(frozen=True)
class Distribution:
    """A metric's merged histogram over a report's rows."""

    spec: BinSpec
    n: int
    total: float
    counts: np.ndarray

    @classmethod
    def empty(cls, spec: BinSpec) -> Distribution:
        return cls(spec, 0, 0.0, np.zeros(spec.bins, dtype=np.int64))

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    def quantile(self, p: float) -> float | None:
        """Lower edge of the bin holding the nearest-rank ``p``-th percentile."""
        if not self.n:
            return None
        rank = max(1, math.ceil(p * self.n / 100))
        i = int(np.searchsorted(np.cumsum(self.counts), rank))
        return self.spec.lower(i)

    def share_at_least(self, x: float) -> float | None:
        """Share of values in bins whose lower edge is >= ``x`` (exact when
        ``x`` is a bin edge)."""
        if not self.n:
            return None
        lowers = np.array([self.spec.lower(i) for i in range(self.spec.bins)])
        return float(self.counts[lowers >= x].sum()) / self.n

    def share_above(self, x: float) -> tuple[float, float] | None:
        """Bounds ``(low, high)`` on the share of values ``> x``: ``low``
        counts bins wholly above ``x``, ``high`` adds the bin holding ``x``."""
        if not self.n:
            return None
        lowers = np.array([self.spec.lower(i) for i in range(self.spec.bins)])
        uppers = np.array([self.spec.upper(i) for i in range(self.spec.bins)])
        low = float(self.counts[lowers > x].sum()) / self.n
        high = float(self.counts[uppers > x].sum()) / self.n
        return low, high

    def share_zero(self) -> float | None:
        """Share of values in the first bin (exactly 0 for integer-valued
        utilisation; below one unit otherwise)."""
        return float(self.counts[0]) / self.n if self.n else None

    def cdf(self) -> list[tuple[float, float]]:
        """``(upper edge, share <= it)`` of every bin up to the last non-empty one."""
        if not self.n:
            return []
        cum = np.cumsum(self.counts) / self.n
        last = int(np.flatnonzero(self.counts).max())
        return [(self.spec.upper(i) if i < self.spec.bins - 1 else self.spec.lower(i), float(cum[i]))
                for i in range(last + 1)]


def merged(spec: BinSpec, parts: Iterable[tuple[int, float, bytes | None]]) -> Distribution:
    """One distribution of ``(n, sum, blob)`` parts."""
    n, total = 0, 0.0
    blobs = []
    for part_n, part_sum, blob in parts:
        n += int(part_n or 0)
        total += float(part_sum or 0.0)
        if blob:
            blobs.append((blob, 1))
    return Distribution(spec, n, total, sum_blobs(blobs, spec.bins))
