"""One matplotlib figure per paper figure (Agg backend, no display).

:data:`FIGURES` registers each figure: its name (the ``--plots DIR`` file stem
and the HTML id), the section it belongs to, its title, when it is drawn and
how. :func:`build_figures` returns the matplotlib ``Figure`` objects (tests
inspect them); :func:`figures` returns PNG bytes. A figure is absent when its
section has no data.

Colours come from :mod:`slurm_acme.report.palette` only, and every bar or line
that stands for a category value carries that value's ``gid``, so a legend
entry always has the colour of what it names.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from slurm_acme.report.labels import label, legend_label
from slurm_acme.report.model import WORKLOAD_TYPES, Report
from slurm_acme.report.palette import colour, gid

_WIDE = (6.5, 3.2)


def _z(value: float | None) -> float:
    return 0.0 if value is None else float(value)


def _new(size: tuple[float, float] = _WIDE) -> tuple[Figure, Any]:
    fig = Figure(figsize=size)
    return fig, fig.add_subplot()


def _legend(ax: Any, **kw: Any) -> None:
    ax.legend(fontsize=7, frameon=False, **kw)


def _types(r: Report) -> list[str]:
    return [t for t in r.workload if t in WORKLOAD_TYPES or r.workload[t]["gpu_jobs"]]


def _stacked(ax: Any, rows: list[tuple[str, dict[str, float | None]]], category: str) -> None:
    """Horizontal 100 % bars, one per row, segments coloured by ``category``."""
    for y, (_, shares) in enumerate(rows):
        left = 0.0
        for value, share in shares.items():
            width = 100 * _z(share)
            bars = ax.barh(y, width, left=left, color=colour(category, value),
                           label=legend_label(category, value) if y == 0 else None)
            for patch in bars.patches:
                patch.set_gid(gid(category, value))
            left += width
    ax.set_yticks(range(len(rows)), [name for name, _ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)


def _workload_share(r: Report) -> Figure:
    fig, ax = _new((6.5, 2.6))
    types = _types(r)
    _stacked(ax, [("share of GPU jobs", {t: r.workload[t]["gpu_job_share"] for t in types}),
                  ("share of GPU time", {t: r.workload[t]["gpu_time_share"] for t in types})], "type")
    ax.set_xlabel("%")
    ax.set_title("Workload mix by type (Fig. 4)")
    _legend(ax, ncol=len(types), loc="upper center", bbox_to_anchor=(0.5, -0.3))
    return fig


def _gpu_demand(r: Report) -> Figure:
    fig, ax = _new()
    types = [t for t in _types(r) if r.workload[t]["gpu_demand"]["p50"] is not None]
    for i, t in enumerate(types):
        d = r.workload[t]["gpu_demand"]
        (bar,) = ax.plot([i, i], [d["p25"], d["p75"]], color=colour("type", t), linewidth=10,
                         solid_capstyle="butt", label=t)
        bar.set_gid(gid("type", t))
        ax.plot([i - 0.25, i + 0.25], [d["p50"], d["p50"]], color="black", linewidth=1.5)
    ax.set_xticks(range(len(types)), types)
    ax.set_xlim(-0.6, len(types) - 0.4)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("GPUs per job")
    ax.set_title("GPU demand by type: p25-p75 bar, median tick (Fig. 5)")
    _legend(ax, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


#: Round durations for axis ticks (seconds) and how they read.
_TIME_TICKS = ((1, "1 s"), (10, "10 s"), (60, "1 min"), (600, "10 min"), (3600, "1 h"), (86400, "1 d"),
               (864000, "10 d"))


def _seconds_axis(axis: Any, low: float, high: float) -> None:
    """Ticks at round durations (``1 min``, ``1 h``, ...) within ``[low, high]``,
    not at 2**k seconds."""
    ticks = [(t, name) for t, name in _TIME_TICKS if low <= t <= high]
    axis.set_ticks([t for t, _ in ticks], [name for _, name in ticks])
    axis.set_minor_locator(matplotlib.ticker.NullLocator())


def _cdf(r: Report, metric: str, title: str) -> Figure:
    fig, ax = _new((6.5, 3.4))
    for group, block in r.durations.items():
        b = block[metric]
        if not b["n"]:
            continue
        (line,) = ax.plot([p["le_s"] for p in b["cdf"]], [100 * _z(p["share"]) for p in b["cdf"]],
                          label=group, color=colour("type", group), linewidth=2.6 if group == "overall" else 1.3)
        line.set_gid(gid("type", group))
    ax.set_xscale("log", base=2)
    top = r.durations["overall"][metric]["cdf"][-1]["le_s"]
    ax.set_xlim(1, top)
    _seconds_axis(ax.xaxis, 1, top)
    ax.set_xlabel("at most this long")
    ax.set_ylabel("% of GPU jobs (CDF)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    _legend(ax, loc="lower right")
    return fig


def _scale_cdf(r: Report) -> Figure:
    fig, ax = _new()
    largest = r.overview["gpu_num_max"] or 1
    points = list(r.scale["gpu_time_cdf"])
    cut = next((i for i, p in enumerate(points) if p["gpus"] >= largest), len(points) - 1)
    points = points[:cut + 1]
    (line,) = ax.step([p["gpus"] for p in points], [100 * _z(p["share"]) for p in points], where="post",
                      color=colour("series", "gpu_time_cdf"), label=legend_label("series", "gpu_time_cdf"))
    line.set_gid(gid("series", "gpu_time_cdf"))
    ax.axvline(256, color="grey", linestyle="--", linewidth=1, label="256 GPUs (large jobs)")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("GPUs per job (N)")
    ax.set_ylabel("% of GPU time (CDF)")
    ax.set_ylim(0, 100)
    ax.set_title("Job scale weighted by GPU time (Fig. 3)")
    _legend(ax, loc="upper left")
    return fig


def _states(r: Report) -> Figure:
    fig, ax = _new((6.5, 2.6))
    _stacked(ax, [("share of GPU jobs", r.states["by_count"]), ("share of GPU time", r.states["by_gpu_time"])],
             "state")
    ax.set_xlabel("%")
    ax.set_title("Final states of GPU jobs")
    _legend(ax, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.3))
    return fig


def _utilisation_cdfs(r: Report) -> Figure:
    """The site's utilisation and power CDFs over Acme's (telemetry's figure)."""
    from slurm_acme.report.util_plots import overlaid_cdfs

    assert r.utilisation is not None
    return overlaid_cdfs(r.utilisation["beside_acme"])


def _power(r: Report) -> Figure:
    assert r.power is not None
    fig = Figure(figsize=_WIDE)
    left, right = fig.subplots(1, 2)
    watts = {k: r.power[k] for k in ("tdp_w", "idle_gpu_power_median_w") if r.power[k] is not None}
    left.barh(range(len(watts)), list(watts.values()), color=colour("series", "reference"))
    left.set_yticks(range(len(watts)), ["TDP", "idle GPU\n(median)"][: len(watts)] if len(watts) == 2
                    else [label(k) for k in watts], fontsize=7)
    left.set_xlabel("W")
    left.invert_yaxis()
    shares = {k: r.power[k] for k in ("over_tdp_share", "gpu_share_of_server_power") if r.power[k] is not None}
    right.barh(range(len(shares)), [100 * v for v in shares.values()], color=colour("series", "reference"))
    right.set_yticks(range(len(shares)), [{"over_tdp_share": "samples\nabove TDP",
                                           "gpu_share_of_server_power": "GPUs' share of\nserver power"}[k]
                                          for k in shares], fontsize=7)
    right.set_xlabel("%")
    right.set_xlim(0, 100)
    right.invert_yaxis()
    fig.suptitle("Power (Fig. 9)")
    return fig


def _failures(r: Report) -> Figure:
    assert r.failures is not None
    rows = r.failures["by_category"]
    fig, ax = _new((6.5, max(2.4, 0.28 * len(rows) + 1.2)))
    seen: set[str] = set()
    for i, x in enumerate(rows):
        origin = x["origin"]
        bars = ax.barh(i, 100 * _z(x["gpu_time_share"]), color=colour("origin", origin),
                       label=origin if origin not in seen else None)
        seen.add(origin)
        for patch in bars.patches:
            patch.set_gid(gid("origin", origin))
    ax.set_yticks(range(len(rows)), [x["category"] for x in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("% of failed GPU time")
    ax.set_title("Failures by category (Table 3)")
    _legend(ax, ncol=len(seen), loc="upper center", bbox_to_anchor=(0.5, -0.3))
    return fig


def _compare(r: Report) -> Figure:
    assert r.compare is not None
    rows = [x for x in r.compare if x["complete_rate_gpu"] is not None]
    fig, ax = _new()
    xs = range(len(rows))
    for i, (key, state) in enumerate((("complete_rate_gpu", "completed"), ("cancel_rate_gpu", "cancelled"),
                                      ("fail_rate_gpu", "failed"))):
        bars = ax.bar([x + (i - 1) * 0.27 for x in xs], [100 * _z(x[key]) for x in rows], 0.27,
                      color=colour("state", state), label=legend_label("state", state))
        for patch in bars.patches:
            patch.set_gid(gid("state", state))
    ax.set_xticks(list(xs), ["this site" if x["source"] == "this report" else str(x["cluster"]) for x in rows])
    ax.set_ylabel("% of GPU jobs")
    ax.set_title("Final states beside other clusters")
    _legend(ax, ncol=3)
    return fig


def _trends(r: Report) -> Figure:
    assert r.trends is not None
    months = r.trends["months"]
    names = [m["month"] for m in months]
    xs = list(range(len(months)))
    fig = Figure(figsize=(11.5, 5.2))
    (hours, mix), (times, shares) = fig.subplots(2, 2)

    def line(ax: Any, values: list[float | None], category: str, value: str, scale: float = 1.0) -> None:
        pts = [(x, scale * v) for x, v in zip(xs, values, strict=True) if v is not None]
        if not pts:
            return
        (drawn,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                           color=colour(category, value), label=legend_label(category, value))
        drawn.set_gid(gid(category, value))

    line(hours, [m["gpu_hours"] for m in months], "series", "gpu_hours")
    hours.set_title("GPU hours per month", fontsize=9)
    hours.set_ylim(bottom=0)
    hours.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    for t in [t for t in months[0]["workload"] if t in WORKLOAD_TYPES]:
        line(mix, [m["workload"][t]["gpu_time_share"] for m in months], "type", t, 100)
    mix.set_title("share of GPU time by type (%)", fontsize=9)
    mix.set_ylim(0, 100)
    line(times, [m["gpu_run_time_median_s"] for m in months], "series", "run_time")
    line(times, [m["gpu_queue_median_s"] for m in months], "series", "queue")
    times.set_yscale("symlog", linthresh=1)
    values = [v for m in months for v in (m["gpu_run_time_median_s"], m["gpu_queue_median_s"]) if v is not None]
    high = max(values, default=1.0) * 3
    times.set_ylim(0, high)
    _seconds_axis(times.yaxis, 0, high)
    times.set_title("GPU jobs: median run time and queue delay", fontsize=9)
    line(shares, [m["failed_gpu_time_share"] for m in months], "series", "failed_gpu_time_share", 100)
    line(shares, [m["util_median"] for m in months], "series", "util_median")
    line(shares, [m["sm_active_median_pct"] for m in months], "series", "sm_active_median")
    shares.set_title("failed GPU time and utilisation (%)", fontsize=9)
    shares.set_ylim(0, 100)
    for ax in (hours, mix, times, shares):
        ax.set_xticks(xs, names, fontsize=7)
        if ax.get_legend_handles_labels()[0]:
            _legend(ax, loc="best")
    fig.suptitle("Month by month")
    return fig


@dataclass(frozen=True)
class FigureSpec:
    name: str
    section: str
    title: str
    wanted: Callable[[Report], bool]
    build: Callable[[Report], Figure]


def _has_gpu_jobs(r: Report) -> bool:
    return r.overview["gpu_jobs"] > 0


#: Every figure, in page order. A section's new figure is one entry here.
FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("trends", "trends", "Month by month", lambda r: r.trends is not None, _trends),
    FigureSpec("workload_share", "workload", "Workload mix by type", _has_gpu_jobs, _workload_share),
    FigureSpec("gpu_demand", "workload", "GPU demand by type", _has_gpu_jobs, _gpu_demand),
    FigureSpec("run_time_cdf", "durations", "GPU-job run time (CDF)", _has_gpu_jobs,
               lambda r: _cdf(r, "run_time", "GPU-job run time by type (Figs. 2, 6)")),
    FigureSpec("queue_cdf", "durations", "GPU-job queue delay (CDF)", _has_gpu_jobs,
               lambda r: _cdf(r, "queue", "GPU-job queue delay by type (Fig. 6)")),
    FigureSpec("scale_cdf", "scale", "Job scale weighted by GPU time", _has_gpu_jobs, _scale_cdf),
    FigureSpec("states", "states", "Final states of GPU jobs", _has_gpu_jobs, _states),
    FigureSpec("utilisation_cdfs", "utilisation", "Utilisation and power beside Acme (CDFs, Figs. 7-9)",
               lambda r: bool(r.utilisation and r.utilisation.get("beside_acme")), _utilisation_cdfs),
    FigureSpec("power", "power", "Power", lambda r: r.power is not None, _power),
    FigureSpec("failures", "failures", "Failures by category", lambda r: r.failures is not None, _failures),
    FigureSpec("compare", "compare", "Final states beside other clusters", lambda r: r.compare is not None,
               _compare),
)
#: Which section each figure belongs to (HTML places it there), and its caption.
FIGURE_SECTIONS = {f.name: f.section for f in FIGURES}
FIGURE_TITLES = {f.name: f.title for f in FIGURES}


def build_figures(report: Report) -> dict[str, Figure]:
    """Every figure the report has data for, as matplotlib figures."""
    return {f.name: f.build(report) for f in FIGURES if f.wanted(report)}


def png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


def figures(report: Report) -> dict[str, bytes]:
    """Every figure the report has data for, as PNG bytes."""
    return {name: png(fig) for name, fig in build_figures(report).items()}
