"""The utilisation and power sections, from the hourly rollups, beside Acme.

Every figure is read off merged fixed-bin histograms
(:mod:`slurm_acme.store.rollups`), never off raw samples, so a month of a
4,704-GPU site costs a few thousand rows and the answer does not change when
raw samples are pruned. Medians are the lower edge of the bin holding the
nearest-rank value (error below one bin); shares at bin edges are exact.
"""

from __future__ import annotations

from typing import Any

from slurm_acme.report.acme_util import ACME_CLUSTERS, ACME_TDP_W, CREDIT, reference
from slurm_acme.report.model import BesideAcme, CdfCurve, MetricCdfs, SideBySide
from slurm_acme.store.rollup_rows import RolledTelemetry
from slurm_acme.store.rollups import METRICS, Distribution

#: (rollup metric, AcmeTrace metric, label, unit) of the distributions shown beside Acme.
BESIDE = (
    ("util", "gpu_util", "GPU utilisation", "%"),
    ("sm", "sm_active", "SM active", "%"),
    ("fb", "gpu_fb_used", "GPU memory used", "%"),
    ("power", "gpu_power", "GPU power", "W"),
    ("temp", "gpu_temp", "GPU temperature", "C"),
    ("cpu", "cpu_util", "CPU utilisation", "%"),
    ("mem", "host_mem_used", "host memory used", "%"),
    ("node_power", "gpu_server_power", "GPU server power", "W"),
)
#: Metrics whose CDFs are overlaid on Acme's (Figs 7-9).
CDF_METRICS = ("util", "sm", "fb", "power", "cpu", "mem", "node_power")


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return float(num) / float(den)


def _bounds(figures: RolledTelemetry, names: tuple[str, ...]) -> dict[str, str]:
    return {name: METRICS[name].error_bound() for name in names if figures.distributions[name].n}


def _medians(figures: RolledTelemetry) -> tuple[SideBySide, ...]:
    out = []
    for name, acme_name, label, unit in BESIDE:
        dist = figures.distributions[name]
        acme = {c: (ref.median() if (ref := reference(c, acme_name)) else None) for c in ACME_CLUSTERS}
        out.append(SideBySide(f"{acme_name}_median", f"median {label}", unit, dist.quantile(50), acme,
                              METRICS[name].error_bound()))
    return tuple(out)


def _acme_share(cluster: str, metric: str, how: str, x: float) -> float | None:
    ref = reference(cluster, metric)
    if ref is None:
        return None
    if how == "at_most":
        return ref.share_at_most(x)
    if how == "below":
        return ref.share_below(x)
    if how == "at_least":
        return 1.0 - ref.share_below(x)
    return 1.0 - ref.share_at_most(x)


def _shares(figures: RolledTelemetry, tdp_watts: float) -> tuple[SideBySide, ...]:
    d = figures.distributions
    at_least_50 = d["sm"].share_at_least(50)
    rows = (
        ("gpus_idle_share", "GPU samples idle (0 % utilisation)", d["util"].share_zero(),
         ("gpu_util", "at_most", 0.0), "exact for integer utilisation (NVML, DCGM)"),
        ("sm_active_below_50_share", "SM active < 50 %", None if at_least_50 is None else 1 - at_least_50,
         ("sm_active", "below", 50.0), "exact (50 % is a bin edge)"),
        ("gpu_memory_ge_75_share", "GPU memory used >= 75 %", d["fb"].share_at_least(75),
         ("gpu_fb_used", "at_least", 75.0), "exact (75 % is a bin edge)"),
        ("power_above_tdp_share", f"GPU power >= TDP (site {tdp_watts:g} W, Acme {ACME_TDP_W:g} W)",
         d["power"].share_at_least(tdp_watts), ("gpu_power", "at_least", ACME_TDP_W),
         "exact at a 5 W bin edge"),
    )
    out = []
    for key, label, site, (acme_metric, how, x), bound in rows:
        acme = {c: _acme_share(c, acme_metric, how, x) for c in ACME_CLUSTERS}
        out.append(SideBySide(key, label, "share", site, acme,
                              f"site: {bound}; Acme: 0.5-percentile resolution"))
    return tuple(out)


def _cdfs(figures: RolledTelemetry) -> tuple[MetricCdfs, ...]:
    out = []
    for name, acme_name, label, unit in BESIDE:
        if name not in CDF_METRICS:
            continue
        dist: Distribution = figures.distributions[name]
        curves = []
        if dist.n:
            curves.append(CdfCurve("site", tuple(dist.cdf())))
        for cluster in ACME_CLUSTERS:
            ref = reference(cluster, acme_name)
            if ref is not None:
                curves.append(CdfCurve(cluster, tuple(ref.points())))
        out.append(MetricCdfs(acme_name, label, unit, tuple(curves)))
    return tuple(out)


def beside_acme(figures: RolledTelemetry, tdp_watts: float) -> BesideAcme:
    return BesideAcme(_medians(figures), _shares(figures, tdp_watts), _cdfs(figures), CREDIT)


def sections(figures: RolledTelemetry, tdp_watts: float, *, cluster_scope: bool) -> tuple[dict | None, dict | None]:
    """The utilisation and power sections (both ``None`` without samples)."""
    if not figures.gpu_samples and not figures.node_samples:
        return None, None
    d = figures.distributions
    utilisation: dict[str, Any] = {
        "gpu_samples": float(figures.gpu_samples),
        "node_samples": float(figures.node_samples),
        "zero_util_share": d["util"].share_zero(),
        "util_median": d["util"].quantile(50),
        "sm_active_median_pct": d["sm"].quantile(50),
        "fb_ge_75_share": d["fb"].share_at_least(75),
        "cpu_median": d["cpu"].quantile(50) if cluster_scope else None,
        "mem_median": d["mem"].quantile(50) if cluster_scope else None,
        "quantile_bounds": _bounds(figures, ("util", "sm", "cpu", "mem")),
        "beside_acme": beside_acme(figures, tdp_watts).to_json(),
    }
    share = _ratio(figures.server_gpu_w, figures.server_w) if cluster_scope else None
    above = d["power"].share_above(tdp_watts)
    power = {
        "tdp_w": float(tdp_watts),
        "idle_gpu_power_median_w": d["idle_power"].quantile(50),
        "over_tdp_share": d["power"].share_at_least(tdp_watts),
        "over_tdp_share_bounds": list(above) if above is not None else None,
        "gpu_share_of_server_power": share,
        "quantile_bounds": _bounds(figures, ("idle_power", "power")),
    }
    return utilisation, power
