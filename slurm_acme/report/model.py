"""The report as data: nine sections, each JSON-ready (plain floats, shares as
fractions 0..1, ``None`` where a figure is undefined, e.g. a share of zero jobs).

Section shapes (all numbers floats):

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
- ``utilisation``: GPU samples in the period: share at 0 % utilisation,
  median utilisation and SM activity, share with framebuffer >= 75 % used;
  node samples: median CPU and memory utilisation. ``power``: median power
  of GPU samples at 0 % utilisation ("idle"), share of GPU samples above the
  TDP (``report.tdp_watts``), and the GPU share of GPU-server power (per
  server, mean total GPU draw over mean server draw, summed over servers with
  both). Both ``None`` without samples. Samples count by their own time
  stamp; with ``--user``/``--type`` only samples of the selected jobs count
  and the node-level figures are ``None`` (a node is shared).
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

SECTIONS = (
    "overview", "workload", "durations", "scale", "states",
    "utilisation", "power", "failures", "compare",
)


@dataclass(frozen=True)
class Report:
    overview: dict[str, Any]
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
