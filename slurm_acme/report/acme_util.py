"""The real Acme utilisation distributions behind the paper's Figs 7-9, shipped
as package data so a report can put a site beside them offline.

``data/acme_util_cdfs.csv`` holds AcmeTrace's per-metric CDFs (GPU util, SM
active, SM occupancy, GPU memory, CPU util, host memory, IB, GPU power, GPU and
memory temperature, GPU/CPU server power; Seren, Kalos, Philly) resampled at
percentiles 0, 0.5, ..., 100 from ``data/utilization/util_pkl``.
Credit: AcmeTrace, Shanghai AI Laboratory (InternLM), CC BY 4.0.
"""

from __future__ import annotations

import csv
import io
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import cache
from importlib import resources

CREDIT = ("Acme distributions: AcmeTrace (Shanghai AI Laboratory), CC BY 4.0; "
          "Hu et al., NSDI'24, Figs 7-9")
#: The GPU board power limit of Acme's A100-SXM-80GB GPUs, for their "above TDP" share.
ACME_TDP_W = 400.0
#: The Acme clusters, in the paper's order.
ACME_CLUSTERS = ("Seren", "Kalos", "Philly")


@dataclass(frozen=True)
class ReferenceCdf:
    """One cluster's distribution of one metric as ``(percentile, value)``
    points (values non-decreasing)."""

    cluster: str
    metric: str
    unit: str
    percentiles: tuple[float, ...]
    values: tuple[float, ...]

    def median(self) -> float:
        return self.quantile(50.0)

    def quantile(self, p: float) -> float:
        i = min(bisect_left(self.percentiles, p), len(self.values) - 1)
        return self.values[i]

    def share_below(self, x: float) -> float:
        """Share of values ``< x``, to the 0.5-percentile resolution of the table."""
        i = bisect_left(self.values, x)
        return 0.0 if i == 0 else self.percentiles[i - 1] / 100.0

    def share_at_most(self, x: float) -> float:
        i = bisect_right(self.values, x)
        return 0.0 if i == 0 else self.percentiles[i - 1] / 100.0

    def points(self) -> list[tuple[float, float]]:
        """``(value, share)`` CDF points for a plot."""
        return [(v, p / 100.0) for p, v in zip(self.percentiles, self.values, strict=True)]


@cache
def reference_cdfs() -> dict[tuple[str, str], ReferenceCdf]:
    """Every shipped CDF, by ``(cluster, metric)``."""
    text = resources.files("slurm_acme").joinpath("data/acme_util_cdfs.csv").read_text("utf-8")
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    units: dict[tuple[str, str], str] = {}
    for raw in csv.DictReader(io.StringIO(text)):
        key = (raw["cluster"], raw["metric"])
        rows.setdefault(key, []).append((float(raw["percentile"]), float(raw["value"])))
        units[key] = raw["unit"]
    out = {}
    for key, points in rows.items():
        points.sort()
        out[key] = ReferenceCdf(key[0], key[1], units[key], tuple(p for p, _ in points),
                                tuple(v for _, v in points))
    return out


def reference(cluster: str, metric: str) -> ReferenceCdf | None:
    return reference_cdfs().get((cluster, metric))
