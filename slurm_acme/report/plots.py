"""One matplotlib figure per paper figure, as PNG bytes (Agg backend, no display).

``figures(report)`` returns ``{name: png}`` in section order; names are the
file stems ``--plots DIR`` writes and the ids the HTML page uses. A figure is
absent when its section has no data.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from slurm_acme.report.model import Report

#: Which section each figure belongs to (HTML places it there).
FIGURE_SECTIONS = {
    "workload_share": "workload",
    "gpu_demand": "workload",
    "run_time_cdf": "durations",
    "queue_cdf": "durations",
    "scale_cdf": "scale",
    "states": "states",
    "utilisation": "utilisation",
    "utilisation_cdfs": "utilisation",
    "power": "power",
    "failures": "failures",
    "compare": "compare",
}


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


def _z(value: float | None) -> float:
    return 0.0 if value is None else float(value)


def _workload_share(r: Report) -> bytes:
    types = list(r.workload)
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    xs = range(len(types))
    ax.bar([x - 0.2 for x in xs], [100 * _z(r.workload[t]["gpu_job_share"]) for t in types], 0.4, label="by job count")
    ax.bar([x + 0.2 for x in xs], [100 * _z(r.workload[t]["gpu_time_share"]) for t in types], 0.4, label="by GPU time")
    ax.set_xticks(list(xs), types)
    ax.set_ylabel("share of GPU jobs (%)")
    ax.set_title("Workload mix (Fig. 4)")
    ax.legend()
    return _png(fig)


def _gpu_demand(r: Report) -> bytes:
    types = [t for t in r.workload if r.workload[t]["gpu_demand"]["p50"] is not None]
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    for i, t in enumerate(types):
        d = r.workload[t]["gpu_demand"]
        ax.plot([i, i], [d["p25"], d["p75"]], color="tab:blue", linewidth=8, solid_capstyle="butt")
        ax.plot([i - 0.2, i + 0.2], [d["p50"], d["p50"]], color="black")
    ax.set_xticks(range(len(types)), types)
    ax.set_yscale("log", base=2)
    ax.set_ylabel("GPUs per job (p25-p75, median)")
    ax.set_title("GPU demand by workload (Fig. 5)")
    return _png(fig)


def _cdf(r: Report, metric: str, title: str) -> bytes:
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    for group, block in r.durations.items():
        b = block[metric]
        if not b["n"]:
            continue
        ax.plot([p["le_s"] for p in b["cdf"]], [100 * _z(p["share"]) for p in b["cdf"]],
                label=group, linewidth=2.5 if group == "overall" else 1.2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("seconds")
    ax.set_ylabel("CDF of GPU jobs (%)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return _png(fig)


def _scale_cdf(r: Report) -> bytes:
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    points = r.scale["gpu_time_cdf"]
    ax.step([p["gpus"] for p in points], [100 * _z(p["share"]) for p in points], where="post")
    ax.axvline(256, color="grey", linestyle="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs per job")
    ax.set_ylabel("CDF of GPU time (%)")
    ax.set_title("Job scale weighted by GPU time (Fig. 3)")
    return _png(fig)


def _states(r: Report) -> bytes:
    fig, ax = plt.subplots(figsize=(6.5, 2.6))
    rows = (("by count", r.states["by_count"]), ("by GPU time", r.states["by_gpu_time"]))
    for y, (_label, shares) in enumerate(rows):
        left = 0.0
        for state, share in shares.items():
            width = 100 * _z(share)
            ax.barh(y, width, left=left, label=state if y == 0 else None)
            left += width
    ax.set_yticks([0, 1], [label for label, _ in rows])
    ax.set_xlabel("share of GPU jobs (%)")
    ax.set_title("Final states")
    ax.legend(ncol=4, fontsize=7, loc="lower right")
    return _png(fig)


def _bars(title: str, data: dict[str, Any], ylabel: str) -> bytes:
    keys = [k for k, v in data.items() if v is not None]
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    ax.bar(range(len(keys)), [100 * data[k] if k.endswith("share") else data[k] for k in keys])
    ax.set_xticks(range(len(keys)), keys, rotation=20, fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return _png(fig)


def _scalars(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is None or isinstance(v, (int, float))}


def _utilisation(r: Report) -> bytes:
    assert r.utilisation is not None
    data = {k: v for k, v in _scalars(r.utilisation).items() if not k.endswith("samples")}
    return _bars("Utilisation (Figs. 7-8)", data, "% (shares and medians)")


def _utilisation_cdfs(r: Report) -> bytes:
    from slurm_acme.report.util_plots import overlaid_cdfs

    assert r.utilisation is not None
    return _png(overlaid_cdfs(r.utilisation["beside_acme"]))


def _power(r: Report) -> bytes:
    assert r.power is not None
    return _bars("Power (Fig. 9)", {k: v for k, v in _scalars(r.power).items() if k != "tdp_w"}, "W or %")


def _failures(r: Report) -> bytes:
    assert r.failures is not None
    rows = r.failures["by_category"]
    fig, ax = plt.subplots(figsize=(6.5, max(2.4, 0.3 * len(rows) + 1)))
    ax.barh([f"{x['origin']}/{x['category']}" for x in rows], [100 * _z(x["gpu_time_share"]) for x in rows])
    ax.set_xlabel("share of failed GPU time (%)")
    ax.set_title("Failures (Table 3)")
    return _png(fig)


def _compare(r: Report) -> bytes:
    assert r.compare is not None
    rows = [x for x in r.compare if x["complete_rate_gpu"] is not None]
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    xs = range(len(rows))
    for i, (key, label) in enumerate((("complete_rate_gpu", "completed"),
                                      ("cancel_rate_gpu", "cancelled"),
                                      ("fail_rate_gpu", "failed"))):
        ax.bar([x + (i - 1) * 0.27 for x in xs], [100 * _z(x[key]) for x in rows], 0.27, label=label)
    ax.set_xticks(list(xs), [str(x["cluster"]) for x in rows])
    ax.set_ylabel("share of GPU jobs (%)")
    ax.set_title("Compared with other clusters")
    ax.legend(fontsize=7)
    return _png(fig)


def figures(report: Report) -> dict[str, bytes]:
    """Every figure the report has data for, as PNG bytes."""
    makers: list[tuple[str, bool, Callable[[Report], bytes]]] = [
        ("workload_share", not report.empty, _workload_share),
        ("gpu_demand", report.overview["gpu_jobs"] > 0, _gpu_demand),
        ("run_time_cdf", report.overview["gpu_jobs"] > 0,
         lambda r: _cdf(r, "run_time", "GPU-job run time (Figs. 2, 6)")),
        ("queue_cdf", report.overview["gpu_jobs"] > 0,
         lambda r: _cdf(r, "queue", "GPU-job queue delay (Fig. 6)")),
        ("scale_cdf", report.overview["gpu_jobs"] > 0, _scale_cdf),
        ("states", report.overview["gpu_jobs"] > 0, _states),
        ("utilisation", report.utilisation is not None, _utilisation),
        ("utilisation_cdfs", bool(report.utilisation and report.utilisation.get("beside_acme")),
         _utilisation_cdfs),
        ("power", report.power is not None, _power),
        ("failures", report.failures is not None, _failures),
        ("compare", report.compare is not None, _compare),
    ]
    return {name: make(report) for name, wanted, make in makers if wanted}
