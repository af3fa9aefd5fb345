"""Telemetry from an existing Prometheus (``telemetry.source = "prometheus"``).

Sites that already run dcgm-exporter and Prometheus need not run this
project's collector: ``sacme collectd import`` reads dcgm-exporter's series
with PromQL over the HTTP API and writes what the collector would have:

- **hourly rollups** from ``query_range`` over whole hours (step = the scrape
  interval), binned exactly as the flush bins the collector's samples. A
  rollup row is replaced whole, so importing an hour again (the current hour
  once it is complete, or a window run twice) corrects or repeats, never
  double-counts;
- **per-job summaries** the jobstats way: for each Slurm job seen (the
  ``hpc_job`` label of dcgm-exporter's HPC job mapping) that has ended,
  ``sum_over_time``/``count_over_time``/``max_over_time`` over the job's
  span, evaluated at its end.

Node metrics (CPU, host memory, server power) are not dcgm-exporter's; from
Prometheus only the GPUs' own figures come, and the GPU share of server
power stays empty.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from slurm_acme.errors import AcmeError
from slurm_acme.store import Store
from slurm_acme.store import telemetry as tstore

HOUR_S = 3600.0
MIB = 2**20
#: Prometheus refuses range queries of more than 11,000 points per series.
MAX_POINTS = 10_000
#: dcgm-exporter metric -> gpu_samples field and the scale from its unit.
FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": ("util_percent", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", float(MIB)),
    "DCGM_FI_DEV_FB_FREE": ("_fb_free_bytes", float(MIB)),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
}
#: Job summary figures: (summary prefix, metric, scale).
SUMMARY_METRICS = (("gpu_util", "DCGM_FI_DEV_GPU_UTIL", 1.0), ("sm_active", "DCGM_FI_PROF_SM_ACTIVE", 1.0),
                   ("gpu_mem", "DCGM_FI_DEV_FB_USED", float(MIB)), ("power", "DCGM_FI_DEV_POWER_USAGE", 1.0))


class PrometheusUnavailable(AcmeError):
    """Prometheus did not answer, or answered with an error (its words quoted)."""


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    points: list[tuple[float, float]]


class PrometheusClient:
    """The two calls of Prometheus's HTTP API the import needs."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise PrometheusUnavailable(f"telemetry.prometheus_url {url!r} is not an http(s) URL")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str]) -> Any:
        target = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(target, timeout=self.timeout) as resp:
                body = json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            try:
                detail = json.loads(exc.read().decode("utf-8")).get("error", "")
            except (ValueError, OSError):
                detail = ""
            raise PrometheusUnavailable(f"Prometheus at {self.url}: HTTP {exc.code}: {detail or exc.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PrometheusUnavailable(f"Prometheus at {self.url} is unreachable: {reason}") from None
        if body.get("status") != "success":
            raise PrometheusUnavailable(f"Prometheus at {self.url}: {body.get('error', 'query failed')}")
        return body["data"]

    def query(self, promql: str, at: float) -> list[Series]:
        data = self._get("/api/v1/query", {"query": promql, "time": f"{at:.3f}"})
        return [Series(r["metric"], [(float(r["value"][0]), float(r["value"][1]))]) for r in data["result"]]

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[Series]:
        """``query_range`` in chunks of at most :data:`MAX_POINTS` steps, series merged."""
        merged: dict[tuple, Series] = {}
        chunk = step * MAX_POINTS
        lo = start
        while lo <= end:
            hi = min(end, lo + chunk - step)
            data = self._get("/api/v1/query_range", {"query": promql, "start": f"{lo:.3f}", "end": f"{hi:.3f}",
                                                     "step": f"{step:g}"})
            for r in data["result"]:
                key = tuple(sorted(r["metric"].items()))
                series = merged.setdefault(key, Series(dict(r["metric"]), []))
                series.points.extend((float(t), float(v)) for t, v in r["values"])
            lo = hi + step
        return list(merged.values())


@dataclass
class ImportResult:
    hours: int = 0
    gpu_samples: int = 0
    rollup_rows: int = 0
    jobs_summarised: list[str] = field(default_factory=list)


def whole_hours(since: float, until: float) -> tuple[float, float]:
    """The import window widened to whole hours: ``[floor(since), ceil(until))``."""
    return math.floor(since / HOUR_S) * HOUR_S, math.ceil(until / HOUR_S) * HOUR_S


def gpu_samples_of(client: PrometheusClient, cluster: str, start: float, end: float, step: float,
                   selector: str = "") -> list[dict[str, Any]]:
    """``gpu_samples``-shaped rows of every dcgm-exporter GPU series in ``[start, end)``."""
    rows: dict[tuple[str, int, float], dict[str, Any]] = {}
    for metric, (name, scale) in FIELDS.items():
        for series in client.query_range(f"{metric}{selector}", start, end - step, step):
            labels = series.labels
            node = labels.get("Hostname") or labels.get("instance", "")
            try:
                gpu = int(labels.get("gpu", ""))
            except ValueError:
                continue
            for ts, value in series.points:
                if not math.isfinite(value) or ts >= end:
                    continue
                row = rows.setdefault((node, gpu, ts), {
                    "cluster": cluster, "node": node, "ts": ts, "gpu_index": gpu,
                    "gpu_uuid": labels.get("UUID") or None, "job_id": labels.get("hpc_job") or None,
                    "source": "prometheus"})
                row[name] = value * scale
                if labels.get("hpc_job"):
                    row["job_id"] = labels["hpc_job"]
    out = []
    for row in rows.values():
        free = row.pop("_fb_free_bytes", None)
        if free is not None and row.get("mem_used_bytes") is not None:
            row["mem_total_bytes"] = row["mem_used_bytes"] + free
        out.append(row)
    return out


def _job_spans(samples: Iterable[dict[str, Any]]) -> dict[str, tuple[float, float, set[str]]]:
    spans: dict[str, list] = {}
    for s in samples:
        job = s.get("job_id")
        if not job:
            continue
        cell = spans.setdefault(job, [s["ts"], s["ts"], set()])
        cell[0], cell[1] = min(cell[0], s["ts"]), max(cell[1], s["ts"])
        cell[2].add(s["node"])
    return {j: (a, b, nodes) for j, (a, b, nodes) in spans.items()}


def job_summary(client: PrometheusClient, cluster: str, job: str, start: float, end: float, step: float,
                nodes: set[str]) -> dict[str, Any]:
    """One job's summary from ``*_over_time`` over its span, evaluated at its end (jobstats)."""
    span = max(step, end - start + step)
    window = f"[{math.ceil(span)}s]"
    sel = '{hpc_job="' + job.replace("\\", "\\\\").replace('"', '\\"') + '"}'
    figures: dict[str, Any] = {}
    gpus: set[tuple[str, str]] = set()
    for prefix, metric, scale in SUMMARY_METRICS:
        sums = client.query(f"sum_over_time({metric}{sel}{window})", end)
        counts = client.query(f"count_over_time({metric}{sel}{window})", end)
        peaks = client.query(f"max_over_time({metric}{sel}{window})", end)
        total = sum(s.points[0][1] for s in sums) * scale
        n = int(sum(s.points[0][1] for s in counts))
        figures[prefix] = (total / n if n else None, max((s.points[0][1] * scale for s in peaks), default=None), n)
        if prefix == "gpu_util":
            gpus = {(s.labels.get("Hostname", ""), s.labels.get("gpu", "")) for s in counts}
    walltime = end - start + step
    power_mean = figures["power"][0]
    n_util = figures["gpu_util"][2]
    coverage = min(1.0, n_util * step / (len(gpus) * walltime)) if gpus and walltime > 0 else 0.0
    return {
        "cluster": cluster, "job_id": job, "start_ts": start, "end_ts": end + step, "exit_code": None,
        "nodes": ",".join(sorted(nodes)), "user": None, "gpus": len(gpus),
        "gpu_util_mean": figures["gpu_util"][0], "gpu_util_max": figures["gpu_util"][1],
        "sm_active_mean": figures["sm_active"][0], "sm_active_max": figures["sm_active"][1],
        "gpu_mem_mean_bytes": figures["gpu_mem"][0], "gpu_mem_max_bytes": figures["gpu_mem"][1],
        "gpu_energy_j": power_mean * len(gpus) * walltime if power_mean is not None else None,
        "node_energy_j": None, "coverage": coverage, "n_gpu_samples": n_util, "n_node_samples": 0,
        "flags": "prometheus",
    }


def import_window(store: Store, client: PrometheusClient, cluster: str, since: float, until: float, *,
                  step: float, now: float, selector: str = "") -> ImportResult:
    """Rollups of the whole hours covering ``[since, until)`` and summaries of
    the jobs that ended in them (a job whose series reach the window's end,
    or ``now``, is still running and is summarised by a later import)."""
    start, end = whole_hours(since, until)
    result = ImportResult(hours=int((end - start) // HOUR_S))
    samples = gpu_samples_of(client, cluster, start, end, step, selector)
    result.gpu_samples = len(samples)
    result.rollup_rows = tstore.import_rollups(store, samples)
    horizon = min(end, now) - 2 * step
    by_job: dict[str, tuple[float, float, set[str]]] = _job_spans(samples)
    for job, (first, last, nodes) in sorted(by_job.items()):
        earlier = tstore.job_summary(store, cluster, job)
        if earlier is not None and earlier.get("start_ts") is not None and "prometheus" in (earlier["flags"] or ""):
            first = min(first, float(earlier["start_ts"]))
        if last >= horizon:  # still running: remember where it started
            tstore.write_summaries(store, [{"cluster": cluster, "job_id": job, "start_ts": first,
                                            "nodes": ",".join(sorted(nodes)), "flags": "prometheus,running"}])
            continue
        tstore.write_summaries(store, [job_summary(client, cluster, job, first, last, step, nodes)])
        result.jobs_summarised.append(job)
    return result
