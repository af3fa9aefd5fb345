"""Each section as tables a person reads: human labels, units, short first.

Text and HTML draw the same :class:`TableView` objects, so a figure carries
the same label in the terminal and on the page. A section is pluggable: add
its key to :data:`~slurm_acme.report.model.SECTIONS`, its title to
:data:`~slurm_acme.report.labels.SECTION_TITLES` and a function here that
turns its data into tables (``SECTION_TABLES``); figures register in
:mod:`slurm_acme.report.plots`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurm_acme.report.labels import STATE_LABELS, duration, fmt, fmt_key, gpus_label, label
from slurm_acme.report.model import PERCENTILES, WORKLOAD_TYPES, Report


@dataclass(frozen=True)
class TableView:
    """A table as it is shown: cells already written as text.

    ``long`` tables (many rows, e.g. CDF points) come after a section's
    figures on the page and are left out of the terminal report; ``groups``
    are row indices before which a separator is drawn (the ``>= 256 GPUs``
    line under the cumulative scale rows)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    long: bool = False
    note: str = ""
    groups: tuple[int, ...] = field(default=())
    #: How many leading columns hold text (left-aligned); the rest are numbers.
    text_columns: int = 1


def _pairs(title: str, data: dict[str, Any], keys: list[str] | None = None) -> TableView:
    keys = keys if keys is not None else list(data)
    return TableView(title, ("figure", "value"), tuple((label(k), fmt_key(k, data[k])) for k in keys))


def _types(workload: dict[str, Any]) -> list[str]:
    """The six types always; a site's extra types when they have GPU jobs."""
    return [t for t in workload if t in WORKLOAD_TYPES or workload[t]["gpu_jobs"]]


def overview_tables(o: dict[str, Any]) -> list[TableView]:
    gpus = " / ".join(fmt(o[k], "gpus") for k in ("gpu_num_mean", "gpu_num_median", "gpu_num_max"))
    rows = [(label(k), fmt_key(k, o[k])) for k in (
        "jobs", "cpu_jobs", "gpu_jobs", "gpu_hours", "gpu_run_time_median_s", "gpu_run_time_mean_s",
        "gpu_run_time_max_s", "gpu_queue_median_s", "gpu_queue_mean_s")]
    rows.append(("GPUs per job (mean / median / max)", gpus))
    return [TableView("", ("figure", "value"), tuple(rows),
                      note="GPU-job figures count jobs with at least one GPU; jobs belong to the period "
                           "by submit time (UTC).")]


def workload_tables(w: dict[str, Any]) -> list[TableView]:
    rows = []
    for t in _types(w):
        d = w[t]["gpu_demand"]
        demand = " / ".join(fmt(d[p], "gpus") for p in ("p25", "p50", "p75"))
        rows.append((t, fmt(w[t]["gpu_jobs"], "count"), fmt(w[t]["gpu_job_share"], "share"),
                     fmt(w[t]["gpu_time_share"], "share"), demand))
    return [TableView("GPU jobs by workload type",
                      ("type", "GPU jobs", "share of GPU jobs", "share of GPU time", "GPUs per job p25 / p50 / p75"),
                      tuple(rows))]


def _cdf_point_label(seconds: float) -> str:
    return f"<= {duration(seconds)}"


def durations_tables(d: dict[str, Any]) -> list[TableView]:
    groups = ["overall", *[t for t in d if t != "overall" and (t in WORKLOAD_TYPES or d[t]["run_time"]["n"])]]
    out = []
    for metric, what in (("run_time", "run time"), ("queue", "queue delay")):
        rows = tuple((g, fmt(d[g][metric]["n"], "count"),
                      *[fmt(d[g][metric][f"p{p}"], "duration") for p in PERCENTILES]) for g in groups)
        out.append(TableView(f"GPU-job {what}: percentiles", ("type", "GPU jobs", *[f"p{p}" for p in PERCENTILES]),
                             rows))
    for metric, what in (("run_time", "run time"), ("queue", "queue delay")):
        points = d["overall"][metric]["cdf"]
        rows = tuple((_cdf_point_label(point["le_s"]),
                      *[fmt(d[g][metric]["cdf"][i]["share"], "share") for g in groups])
                     for i, point in enumerate(points))
        out.append(TableView(f"GPU-job {what}: share of jobs at most this long (CDF)", (what, *groups), rows,
                             long=True))
    return out


def scale_tables(s: dict[str, Any], largest: float | None) -> list[TableView]:
    """Cumulative rows up to the first size that covers the largest job, then
    the large-job share on its own, labelled line."""
    rows = []
    for point in s["gpu_time_cdf"]:
        rows.append((f"<= {gpus_label(point['gpus'])}", fmt(point["share"], "share")))
        if largest is None or point["gpus"] >= largest:
            break
    large = ("jobs of >= 256 GPUs (large)", fmt(s["share_gpu_time_ge_256"], "share"))
    return [TableView("GPU time by job size", ("GPUs per job", "share of GPU time"), (*rows, large),
                      note="Cumulative: the share of GPU time in jobs of at most that many GPUs. "
                           "The last line is the share in jobs of 256 GPUs or more.",
                      groups=(len(rows),))]


def states_tables(s: dict[str, Any]) -> list[TableView]:
    rows = tuple((STATE_LABELS.get(k, k), fmt(s["by_count"][k], "share"), fmt(s["by_gpu_time"][k], "share"))
                 for k in s["by_count"])
    return [TableView(f"{fmt(s['gpu_jobs'], 'count')} GPU jobs", ("final state", "share of GPU jobs",
                                                                 "share of GPU time"), rows,
                      note="TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL and DEADLINE count as failed.")]


def _scalars(data: dict[str, Any]) -> list[str]:
    return [k for k, v in data.items() if v is None or isinstance(v, (int, float, str))]


def _bounds_note(bounds: dict[str, str] | None) -> str:
    if not bounds:
        return ""
    hows = sorted(set(bounds.values()))
    return f"Medians read off the hourly telemetry rollups: each {' or '.join(hows)} from the exact value."


def beside_acme_table(beside: dict[str, Any]) -> TableView:
    """The site's utilisation and power medians and key shares beside Acme's."""
    rows = [*beside["medians"], *beside["shares"]]
    clusters = list(rows[0]["acme"]) if rows else []

    def cell(value: float | None, unit: str) -> str:
        if unit == "share":
            return fmt(value, "share")
        if value is None:
            return "-"
        if unit in ("W", "%"):
            return fmt(value, "watts" if unit == "W" else "percent")
        return f"{fmt(value)} {unit}"

    body = tuple((r["label"], cell(r["site"], r["unit"]), *[cell(r["acme"][c], r["unit"]) for c in clusters])
                 for r in rows)
    return TableView("Utilisation and power beside Acme (Figs. 7-9): medians and key shares",
                     ("figure", "this site", *clusters), body, note=beside["credit"])


def utilisation_tables(u: dict[str, Any]) -> list[TableView]:
    out = [TableView("", ("figure", "value"), tuple((label(k), fmt_key(k, u[k])) for k in _scalars(u)),
                     note=_bounds_note(u.get("quantile_bounds")))]
    if u.get("beside_acme"):
        out.append(beside_acme_table(u["beside_acme"]))
    return out


def power_tables(p: dict[str, Any]) -> list[TableView]:
    notes = []
    bounds = p.get("over_tdp_share_bounds")
    if bounds:
        low, high = (fmt(b, "share") for b in bounds)
        notes.append(f"Samples strictly above TDP: {low if low == high else f'{low} to {high}'}.")
    if p.get("quantile_bounds"):
        notes.append(_bounds_note(p["quantile_bounds"]))
    return [TableView("", ("figure", "value"), tuple((label(k), fmt_key(k, p[k])) for k in _scalars(p)),
                      note=" ".join(notes))]


def failures_tables(f: dict[str, Any]) -> list[TableView]:
    def row(r: dict[str, Any]) -> tuple[str, ...]:
        return (fmt(r["count"], "count"), fmt(r["gpu_time_share"], "share"), fmt(r["mean_gpus"], "gpus"),
                fmt(r["ttf_median_s"], "duration"), fmt(r["recovery_median_s"], "duration"))

    cols = ("failures", "failed GPU time", "mean GPUs", "time to failure", "recovery")
    note = ("Failed GPU time: each origin's share of GPUs x time to failure. Time to failure and "
            "recovery: medians.")
    by_origin = TableView("by origin", ("origin", *cols), tuple((r["origin"], *row(r)) for r in f["by_origin"]),
                          note=note)
    by_category = TableView("by category", ("origin", "category", *cols),
                            tuple((r["origin"], r["category"], *row(r)) for r in f["by_category"]),
                            long=len(f["by_category"]) > 12, text_columns=2)
    nodes = f.get("by_node") or []
    by_node = TableView("by node (node-health ledger)", ("node", "categories", "events", "jobs hit", "GPU-hours lost"),
                        tuple((r["node"], ", ".join(r["categories"]), fmt(r["events"], "count"),
                               fmt(r["jobs_hit"], "count"), fmt(r["gpu_hours_lost"], "hours")) for r in nodes),
                        note="Events: infrastructure events that named the node (diagnoses, health checks, "
                             "its collector's hardware events). GPU-hours lost: GPUs x time to failure of "
                             "the failed attempts whose diagnosis named it.",
                        long=len(nodes) > 12, text_columns=2)
    return [by_origin, by_category, by_node] if nodes else [by_origin, by_category]


#: Rows of the compare table: AcmeTrace summary columns, in reading order.
COMPARE_ROWS = (
    "job_num", "gpu_job_num", "med_run_time_gpu", "avg_run_time_gpu", "med_que_time_gpu", "avg_que_time_gpu",
    "med_gpu_num", "avg_gpu_num", "max_gpu", "complete_rate_gpu", "cancel_rate_gpu", "fail_rate_gpu",
    "complete_rate_gpu_time", "cancel_rate_gpu_time", "fail_rate_gpu_time",
)


def compare_tables(rows: list[dict[str, Any]]) -> list[TableView]:
    """Transposed: one column per cluster, one row per figure, so six
    clusters fit a terminal and a page."""
    names = tuple("this site" if r["source"] == "this report" else str(r["cluster"]) for r in rows)
    body = tuple((label(k), *[fmt_key(k, r[k]) for r in rows]) for k in COMPARE_ROWS)
    return [TableView("This site beside AcmeTrace (Seren, Kalos) and earlier clusters (Philly, Helios, PAI)",
                      ("figure", *names), body,
                      note="Shares of completed, cancelled and failed GPU jobs by count and by GPU time.")]


def trends_tables(t: dict[str, Any]) -> list[TableView]:
    months = t["months"]

    def month(m: dict[str, Any]) -> str:
        return m["month"] + ("*" if m["partial"] else "")

    main = TableView(
        "Per month", ("month", "jobs", "GPU hours", "run time", "queue delay", "failed GPU time",
                      "GPU util.", "SM active"),
        tuple((month(m), fmt(m["jobs"], "count"), fmt(m["gpu_hours"], "hours"),
               fmt(m["gpu_run_time_median_s"], "duration"), fmt(m["gpu_queue_median_s"], "duration"),
               fmt(m["failed_gpu_time_share"], "share"), fmt(m["util_median"], "percent"),
               fmt(m["sm_active_median_pct"], "percent")) for m in months),
        note="Run time and queue delay: medians of GPU jobs. Failed GPU time: share of the month's GPU time in "
             "failed jobs. GPU util. and SM active: medians of GPU samples (- without telemetry). "
             "* a month cut by the period's bounds.")
    types = [t for t in months[0]["workload"] if t in WORKLOAD_TYPES or any(m["workload"][t]["gpu_job_share"]
                                                                             for m in months)]
    def split_cell(shares: dict[str, float | None]) -> str:
        return " / ".join("-" if v is None else f"{100 * v:.1f}" for v in
                          (shares["gpu_job_share"], shares["gpu_time_share"]))

    split = TableView(
        "Workload split per month: % of GPU jobs / % of GPU time", ("month", *types),
        tuple((month(m), *[split_cell(m["workload"][ty]) for ty in types]) for m in months))
    return [main, split]


def findings_table(findings: list[dict[str, Any]]) -> TableView:
    return TableView("", ("finding (this site)", "Acme", "source"),
                     tuple((f["text"], f["acme_text"].removeprefix("Acme: "), f["source"]) for f in findings),
                     text_columns=3)


#: Section key -> its tables (the report is passed for sections that need
#: another section's figures, e.g. the scale table stops at the largest job).
SECTION_TABLES: dict[str, Callable[[Report, Any], list[TableView]]] = {
    "findings": lambda r, data: [findings_table(data)],
    "overview": lambda r, data: overview_tables(data),
    "trends": lambda r, data: trends_tables(data),
    "workload": lambda r, data: workload_tables(data),
    "durations": lambda r, data: durations_tables(data),
    "scale": lambda r, data: scale_tables(data, r.overview["gpu_num_max"]),
    "states": lambda r, data: states_tables(data),
    "utilisation": lambda r, data: utilisation_tables(data),
    "power": lambda r, data: power_tables(data),
    "failures": lambda r, data: failures_tables(data),
    "compare": lambda r, data: compare_tables(data),
}


def section_tables(report: Report, section: str) -> list[TableView]:
    """The tables of one section; none when it has no data."""
    data = getattr(report, section)
    if data is None:
        return []
    return SECTION_TABLES[section](report, data)
