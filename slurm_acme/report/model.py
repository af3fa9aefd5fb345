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
  cancelled, failed and other GPU jobs.
- ``utilisation``/``power``: ``None`` without samples.
- ``failures``: ``None`` without failures; else ``by_category`` and
  ``by_origin`` rows.
- ``compare``: ``None`` unless asked; else rows, this cluster first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The paper's workload types, in its order.
WORKLOAD_TYPES = ("Eval", "Pretrain", "SFT", "MLLM", "Debug", "Other")
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
