"""``--format text``: the report as rich tables for a terminal (or a file)."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.table import Table

from slurm_acme.report.model import PERCENTILES, Report


def fmt(value: Any, kind: str = "num") -> str:
    """One cell: shares as percentages, seconds as-is, ``-`` for undefined."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if kind == "share":
        return f"{100 * value:.1f}%"
    if kind == "int":
        return f"{value:,.0f}"
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.2f}"


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right")
    return table


def _overview(r: Report) -> Table:
    o = r.overview
    t = _table("overview", ["figure", "value"])
    for label, key, kind in (
        ("jobs", "jobs", "int"), ("CPU jobs", "cpu_jobs", "int"), ("GPU jobs", "gpu_jobs", "int"),
        ("GPU hours", "gpu_hours", "int"),
        ("GPU run time median (s)", "gpu_run_time_median_s", "num"),
        ("GPU run time mean (s)", "gpu_run_time_mean_s", "num"),
        ("GPU queue delay median (s)", "gpu_queue_median_s", "num"),
        ("GPU queue delay mean (s)", "gpu_queue_mean_s", "num"),
        ("GPUs per job mean / median / max", None, "num"),
    ):
        if key is None:
            value = " / ".join(fmt(o[k]) for k in ("gpu_num_mean", "gpu_num_median", "gpu_num_max"))
        else:
            value = fmt(o[key], kind)
        t.add_row(label, value)
    return t


def _workload(r: Report) -> Table:
    t = _table("workload (GPU jobs)", ["type", "jobs", "share by count", "share by GPU time",
                                       "GPUs p25", "p50", "p75"])
    for wtype, w in r.workload.items():
        d = w["gpu_demand"]
        t.add_row(wtype, fmt(w["gpu_jobs"], "int"), fmt(w["gpu_job_share"], "share"),
                  fmt(w["gpu_time_share"], "share"), fmt(d["p25"]), fmt(d["p50"]), fmt(d["p75"]))
    return t


def _durations(r: Report, metric: str, title: str) -> Table:
    t = _table(title, ["type", "n", *[f"p{p}" for p in PERCENTILES]])
    for group, block in r.durations.items():
        b = block[metric]
        t.add_row(group, fmt(b["n"], "int"), *[fmt(b[f"p{p}"]) for p in PERCENTILES])
    return t


def _scale(r: Report) -> Table:
    t = _table("scale: GPU time by job size", ["GPUs per job <=", "share of GPU time"])
    for point in r.scale["gpu_time_cdf"]:
        t.add_row(fmt(point["gpus"]), fmt(point["share"], "share"))
    t.add_row(">= 256 GPUs", fmt(r.scale["share_gpu_time_ge_256"], "share"))
    return t


def _states(r: Report) -> Table:
    t = _table("states (GPU jobs; TIMEOUT, NODE_FAIL, OOM count as failed)",
               ["state", "by count", "by GPU time"])
    for state, share in r.states["by_count"].items():
        t.add_row(state, fmt(share, "share"), fmt(r.states["by_gpu_time"][state], "share"))
    return t


def _pairs(title: str, data: dict[str, Any]) -> Table:
    t = _table(title, ["figure", "value"])
    for key, value in data.items():
        if value is None or isinstance(value, (int, float, str)):
            t.add_row(key, fmt(value, "share" if "share" in key else "num"))
    return t


def _beside_acme(beside: dict[str, Any]) -> Table:
    """The site's medians and key shares beside Seren, Kalos and Philly."""
    clusters = list(beside["medians"][0]["acme"]) if beside["medians"] else []
    t = _table("utilisation and power beside Acme (Figs 7-9)", ["figure", "this site", *clusters])
    for row in (*beside["medians"], *beside["shares"]):
        kind = "share" if row["unit"] == "share" else "num"
        unit = "" if row["unit"] == "share" else f" ({row['unit']})"
        t.add_row(row["label"] + unit, fmt(row["site"], kind), *[fmt(row["acme"][c], kind) for c in clusters])
    t.caption = beside["credit"] + "; site medians: lower bin edge (error < 1 bin)"
    return t


def _failures(r: Report) -> Table:
    assert r.failures is not None
    t = _table("failures", ["origin", "category", "count", "share of failed GPU time",
                            "mean GPUs", "median TTF (s)", "median recovery (s)"])
    for row in r.failures["by_category"]:
        t.add_row(row["origin"], row["category"], fmt(row["count"], "int"),
                  fmt(row["gpu_time_share"], "share"), fmt(row["mean_gpus"]),
                  fmt(row["ttf_median_s"]), fmt(row["recovery_median_s"]))
    return t


def _compare(r: Report) -> Table:
    assert r.compare is not None
    cols = ["job_num", "gpu_job_num", "med_run_time_gpu", "med_que_time_gpu",
            "complete_rate_gpu", "cancel_rate_gpu", "fail_rate_gpu", "fail_rate_gpu_time"]
    t = _table("compare with AcmeTrace, Philly, Helios, PAI", ["cluster", *cols])
    for row in r.compare:
        t.add_row(str(row["cluster"]), *[fmt(row[c], "share" if "rate" in c else "num") for c in cols])
    return t


def render_text(report: Report, width: int = 120) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    o = report.overview
    scope = ", ".join(f"{k} {o[k]}" for k in ("cluster", "user", "type") if o[k]) or "all jobs"
    console.print(f"sacme report: {o['period']['label']} ({scope})")
    if report.empty:
        console.print(f"Empty report: no jobs were submitted in {o['period']['label']} ({scope}).")
    else:
        for table in (_overview(report), _workload(report),
                      _durations(report, "run_time", "durations: GPU-job run time (s)"),
                      _durations(report, "queue", "durations: GPU-job queue delay (s)"),
                      _scale(report), _states(report)):
            console.print(table)
    if report.utilisation is not None:
        console.print(_pairs("utilisation", report.utilisation))
        if report.utilisation.get("beside_acme"):
            console.print(_beside_acme(report.utilisation["beside_acme"]))
    if report.power is not None:
        console.print(_pairs("power", report.power))
    if report.failures is not None:
        console.print(_failures(report))
    if report.compare is not None:
        console.print(_compare(report))
    return buffer.getvalue()
