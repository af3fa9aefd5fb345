"""The report as data: eleven sections, each JSON-ready (plain floats, shares as
fractions 0..1, ``None`` where a figure is undefined, e.g. a share of zero jobs).

Section shapes (all numbers floats):

- ``findings``: the headline findings, first on every page: a list of
  ``{"key", "label", "value", "unit", "acme_value", "acme_text", "text",
  "source", "available"}``. ``value`` is this site's figure (``None`` and
  ``available: false`` when its data is missing, which ``text`` says);
  ``acme_value`` is Acme's (a number, a ``[low, high]`` range, or ``None``
  where the paper states it in words, see ``acme_text``); ``text`` is one
  sentence with the number; ``source`` cites where Acme's figure comes from.
  See :mod:`slurm_acme.report.findings`.
- ``trends``: ``None`` unless the period spans more than one calendar month;
  else ``{"months": [...]}``, one row per month (UTC, clipped to the period):
  ``month``, ``since``, ``until``, ``partial``, ``jobs``, ``gpu_jobs``,
  ``gpu_hours``, ``workload`` (per type ``gpu_job_share``,
  ``gpu_time_share``), ``gpu_run_time_median_s``, ``gpu_queue_median_s``,
  ``failed_gpu_time_share``, ``util_median``, ``sm_active_median_pct`` (the
  utilisation section's medians, %).

- ``overview``: period, filters, ``empty``, ``jobs``, ``cpu_jobs``, ``gpu_jobs``,
  ``gpu_hours``, ``gpu_run_time_{median,mean,max}_s``,
  ``gpu_queue_{median,mean}_s``, ``gpu_num_{mean,median,max}``.
- ``workload``: per type: ``gpu_jobs``, ``gpu_job_share``, ``gpu_time_share``,
  ``gpu_demand`` (``p25``, ``p50``, ``p75`` GPUs per job).
- ``durations``: ``overall`` and per type: ``run_time`` and ``queue``, each
  with ``n``, ``p10`` .. ``p99`` and ``cdf`` = ``[{"le_s": 2**k, "share": ..}]``.
- ``scale``: ``gpu_time_cdf`` = ``[{"gpus": 2**k, "share": ..}]`` (share of
  GPU time in jobs of at most that many GPUs), ``share_gpu_time_ge_256``.
- ``states``: ``by_count`` and ``by_gpu_time`` shares of completed,
  cancelled (``CANCELLED`` and ``CANCELLED by N``), failed (``FAILED``,
  ``TIMEOUT``, ``NODE_FAIL``, ``OUT_OF_MEMORY``, ``BOOT_FAIL``, ``DEADLINE``)
  and other (still running, ``PREEMPTED``, ...) GPU jobs.
- ``utilisation``: read off the hourly telemetry rollups only (the same
  with or without raw samples), over the hours that start in the period:
  GPU samples: share at 0 % utilisation, median utilisation (%) and SM
  activity (``sm_active_median_pct``, %), share with framebuffer >= 75 %
  used; node samples: median CPU and memory utilisation; ``quantile_bounds``
  (how far each median can be from the exact nearest-rank one: less than one
  histogram bin); ``beside_acme`` (:class:`BesideAcme`: medians and key shares
  beside Seren, Kalos and Philly, and the CDFs to overlay). ``power``: median
  power of GPU samples at 0 % utilisation ("idle"), share of GPU samples at or
  above the TDP (``report.tdp_watts``; ``over_tdp_share_bounds`` bound the
  share strictly above it), and the GPU share of GPU-server power (per
  server-hour, mean total GPU draw and mean server draw, each summed over the
  server-hours that have both, one over the other). Both ``None`` without samples. With ``--user``/``--type`` only the
  selected jobs' GPU-hours count and the node-level figures are ``None``
  (a node is shared).
- ``failures``: failures whose time stamp falls in the period, per
  (origin, category) and per origin: count, share of failed GPU time
  (``gpus * time_to_failure_s``), mean GPUs, median time to failure and
  median recovery time. ``None`` without failures.
- ``compare``: ``None`` unless asked; else rows, this cluster first, then the
  shipped AcmeTrace summary rows (Seren, Kalos, Philly, Helios, PAI).

Jobs belong to a period by submit time (UTC). Every GPU-job figure uses
``gpus > 0``. Quantiles are nearest rank (see :mod:`slurm_acme.store.report`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

#: The paper's workload types, in its order. The one definition: config
#: validation, ingest, the trace importer and the report all import it.
WorkloadType = Literal["Eval", "Pretrain", "SFT", "MLLM", "Debug", "Other"]
WORKLOAD_TYPES: tuple[WorkloadType, ...] = get_args(WorkloadType)
#: Percentiles reported for run time and queue delay.
PERCENTILES = (10, 25, 50, 75, 90, 99)
#: CDF points at 2**k seconds (run time up to ~24 days, queue up to ~9 h).
RUN_CDF_KS = tuple(range(22))
QUEUE_CDF_KS = tuple(range(16))
#: GPUs per job at which the GPU-time-weighted scale CDF is read (1..8192).
SCALE_CDF_KS = tuple(range(14))
#: Jobs of at least this many GPUs are "large" (the paper's Fig. 3 cut).
LARGE_JOB_GPUS = 256

#: Section keys in page order (JSON keys, HTML ids).
SECTIONS = (
    "findings", "overview", "trends", "workload", "durations", "scale", "states",
    "utilisation", "power", "failures", "compare",
)


@dataclass(frozen=True)
class Report:
    findings: list[dict[str, Any]]
    overview: dict[str, Any]
    trends: dict[str, Any] | None
    workload: dict[str, Any]
    durations: dict[str, Any]
    scale: dict[str, Any]
    states: dict[str, Any]
    utilisation: dict[str, Any] | None
    power: dict[str, Any] | None
    failures: dict[str, Any] | None
    compare: list[dict[str, Any]] | None

    @property
    def empty(self) -> bool:
        return bool(self.overview["empty"])

    def to_json(self) -> dict[str, Any]:
        """One object whose keys are exactly the section names."""
        return {name: getattr(self, name) for name in SECTIONS}


# -- utilisation and power beside Acme (data: telemetry; rendering: report) -----

@dataclass(frozen=True)
class SideBySide:
    """One figure of this site beside the Acme clusters' (Seren, Kalos, Philly):
    a median (``unit`` as given) or a share (0..1). ``acme`` maps a cluster to
    its figure, ``None`` where AcmeTrace has no such metric for it. ``bound``
    says how far the site's figure can be from the exact one."""

    key: str
    label: str
    unit: str
    site: float | None
    acme: dict[str, float | None]
    bound: str

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "unit": self.unit, "site": self.site,
                "acme": dict(self.acme), "bound": self.bound}


@dataclass(frozen=True)
class CdfCurve:
    """A CDF as ``(value, share of values <= it)`` points; ``source`` is
    ``"site"`` or an Acme cluster name."""

    source: str
    points: tuple[tuple[float, float], ...]

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "points": [list(p) for p in self.points]}


@dataclass(frozen=True)
class MetricCdfs:
    """The site's CDF of one metric overlaid on Acme's (the paper's Figs 7-9)."""

    key: str
    label: str
    unit: str
    curves: tuple[CdfCurve, ...]

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "unit": self.unit,
                "curves": [c.to_json() for c in self.curves]}


@dataclass(frozen=True)
class BesideAcme:
    """The site's utilisation and power distributions beside Acme's: medians,
    the key shares (GPUs idle, SM active < 50 %, memory >= 75 %, power above
    TDP) and the CDFs to overlay. JSON: ``utilisation.beside_acme``."""

    medians: tuple[SideBySide, ...]
    shares: tuple[SideBySide, ...]
    cdfs: tuple[MetricCdfs, ...]
    credit: str

    def to_json(self) -> dict[str, Any]:
        return {"medians": [m.to_json() for m in self.medians],
                "shares": [s.to_json() for s in self.shares],
                "cdfs": [c.to_json() for c in self.cdfs], "credit": self.credit}
