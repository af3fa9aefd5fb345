"""What a person reads instead of a JSON key: section titles, figure labels
with their units, and how each kind of value is written.

The JSON keeps its keys; text and HTML look every label up here, so a figure
is named the same way in the terminal, on the page and in the findings.
"""

from __future__ import annotations

import math

#: Section headings, by JSON key.
SECTION_TITLES = {
    "findings": "Findings",
    "overview": "Overview",
    "trends": "Month by month",
    "workload": "Workload mix",
    "durations": "Run time and queueing",
    "scale": "Job scale",
    "states": "Final states",
    "utilisation": "Utilisation",
    "power": "Power",
    "failures": "Failures",
    "compare": "Beside Acme and earlier clusters",
}

#: ``key: (label, kind)``. The kind says how :func:`fmt` writes the value and
#: carries the unit: ``duration`` (seconds, written as s/min/h/d), ``share``
#: (a fraction, written as %), ``percent`` (already 0-100), ``count``,
#: ``hours``, ``gpus``, ``watts``, ``text``, ``time`` (UTC epoch seconds).
LABELS: dict[str, tuple[str, str]] = {
    # overview
    "jobs": ("jobs", "count"),
    "cpu_jobs": ("CPU-only jobs", "count"),
    "gpu_jobs": ("GPU jobs", "count"),
    "gpu_hours": ("GPU hours", "hours"),
    "gpu_run_time_median_s": ("median GPU-job run time", "duration"),
    "gpu_run_time_mean_s": ("mean GPU-job run time", "duration"),
    "gpu_run_time_max_s": ("longest GPU-job run time", "duration"),
    "gpu_queue_median_s": ("median GPU-job queue delay", "duration"),
    "gpu_queue_mean_s": ("mean GPU-job queue delay", "duration"),
    "gpu_num_mean": ("mean GPUs per job", "gpus"),
    "gpu_num_median": ("median GPUs per job", "gpus"),
    "gpu_num_max": ("most GPUs in one job", "gpus"),
    # workload
    "gpu_job_share": ("share of GPU jobs", "share"),
    "gpu_time_share": ("share of GPU time", "share"),
    # utilisation
    "gpu_samples": ("GPU samples", "count"),
    "node_samples": ("node samples", "count"),
    "zero_util_share": ("GPU samples at 0 % utilisation", "share"),
    "util_median": ("median GPU utilisation", "percent"),
    "sm_active_median_pct": ("median SM activity", "percent"),
    "fb_ge_75_share": ("GPU samples with >= 75 % of memory used", "share"),
    "cpu_median": ("median CPU utilisation (nodes)", "percent"),
    "mem_median": ("median host-memory utilisation (nodes)", "percent"),
    # power
    "tdp_w": ("GPU TDP (report.tdp_watts)", "watts"),
    "idle_gpu_power_median_w": ("median power of an idle GPU (0 % util.)", "watts"),
    "over_tdp_share": ("GPU samples at or above TDP", "share"),
    "gpu_share_of_server_power": ("GPUs' share of GPU-server power", "share"),
    # failures
    "count": ("failures", "count"),
    "mean_gpus": ("mean GPUs", "gpus"),
    "ttf_median_s": ("median time to failure", "duration"),
    "recovery_median_s": ("median recovery", "duration"),
    # compare (the AcmeTrace summary's columns)
    "job_num": ("jobs", "count"),
    "cpu_job_num": ("CPU-only jobs", "count"),
    "gpu_job_num": ("GPU jobs", "count"),
    "avg_run_time_gpu": ("mean GPU-job run time", "duration"),
    "med_run_time_gpu": ("median GPU-job run time", "duration"),
    "max_run_time_gpu": ("longest GPU-job run time", "duration"),
    "avg_que_time_gpu": ("mean GPU-job queue delay", "duration"),
    "med_que_time_gpu": ("median GPU-job queue delay", "duration"),
    "avg_gpu_num": ("mean GPUs per job", "gpus"),
    "med_gpu_num": ("median GPUs per job", "gpus"),
    "max_gpu": ("most GPUs in one job", "gpus"),
    "complete_rate_gpu": ("completed, share of GPU jobs", "share"),
    "cancel_rate_gpu": ("cancelled, share of GPU jobs", "share"),
    "fail_rate_gpu": ("failed, share of GPU jobs", "share"),
    "complete_rate_gpu_time": ("completed, share of GPU time", "share"),
    "cancel_rate_gpu_time": ("cancelled, share of GPU time", "share"),
    "fail_rate_gpu_time": ("failed, share of GPU time", "share"),
    # trends
    "failed_gpu_time_share": ("failed share of GPU time", "share"),
}

#: Final-state classes (``states`` keys), as a person says them.
STATE_LABELS = {"completed": "completed", "cancelled": "cancelled", "failed": "failed",
                "other": "other (running, preempted, ...)"}


#: Measures drawn as lines or bars of their own, by palette key.
SERIES_LABELS = {
    "gpu_hours": "GPU hours",
    "gpu_time_cdf": "GPU time in jobs of <= N GPUs",
    "run_time": "median run time",
    "queue": "median queue delay",
    "failed_gpu_time_share": "failed share of GPU time",
    "util_median": "median GPU utilisation",
    "sm_active_median": "median SM activity",
}


def legend_label(category: str, value: str) -> str:
    """What a figure's legend says for ``value`` of a palette ``category``."""
    if category == "cluster" and value == "site":
        return "this site"
    if category == "state":
        return STATE_LABELS.get(value, value)
    if category == "series":
        return SERIES_LABELS.get(value, value)
    return value


def label(key: str) -> str:
    """The human label of a JSON key (the key itself when none is declared)."""
    return LABELS[key][0] if key in LABELS else key.replace("_", " ")


def kind(key: str) -> str:
    return LABELS[key][1] if key in LABELS else "num"


def duration(seconds: float) -> str:
    """``45 s``, ``2.0 min``, ``5.3 h``, ``3.1 d``: the unit a person would pick."""
    s = float(seconds)
    if abs(s) < 60:
        return f"{s:.0f} s" if s.is_integer() or abs(s) >= 10 else f"{s:.1f} s"
    if abs(s) < 2 * 3600:
        return f"{s / 60:.1f} min"
    if abs(s) < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:,.1f} d"


def _number(value: float) -> str:
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def fmt(value: object, value_kind: str = "num") -> str:
    """One value as text; ``-`` where it is undefined."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str) or not isinstance(value, (int, float)):
        return str(value)
    if value_kind == "share":
        return f"{100 * value:.1f} %"
    if value_kind == "percent":
        return f"{value:.1f} %"
    if value_kind == "duration":
        return duration(value)
    if value_kind == "count":
        return f"{value:,.0f}"
    if value_kind == "hours":
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"
    if value_kind == "watts":
        return f"{value:,.0f} W"
    return _number(float(value))


def fmt_key(key: str, value: object) -> str:
    """``value`` written the way ``key``'s kind says."""
    return fmt(value, kind(key))


def gpus_label(n: float) -> str:
    """``1 GPU``, ``8 GPUs``."""
    return f"{n:,.0f} GPU" + ("" if n == 1 else "s")
