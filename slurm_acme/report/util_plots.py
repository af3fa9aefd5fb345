"""The site's utilisation and power CDFs overlaid on Acme's (the paper's Figs 7-9).

Input is the JSON of :class:`slurm_acme.report.model.BesideAcme`
(``report.utilisation["beside_acme"]``); output a matplotlib ``Figure`` with
one panel per metric, the site drawn bold over Seren, Kalos and Philly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

from slurm_acme.report.labels import legend_label
from slurm_acme.report.palette import colour, gid

#: Line styles per source, so the site stands out and Acme's clusters stay apart
#: (colours: the report's one cluster palette).
_STYLE: dict[str, dict[str, Any]] = {"site": {"linewidth": 2.4}, "Philly": {"linestyle": "--"}}


def overlaid_cdfs(beside_acme: Mapping[str, Any], keys: Sequence[str] | None = None,
                  *, site_label: str = "this site") -> Figure:
    """One CDF panel per metric in ``keys`` (default: every metric with site data)."""
    metrics = [m for m in beside_acme["cdfs"]
               if (keys is None or m["key"] in keys) and any(c["source"] == "site" for c in m["curves"])]
    cols = 2 if len(metrics) > 1 else 1
    rows = max(1, -(-len(metrics) // cols))
    fig = Figure(figsize=(6.5, 2.5 * rows))
    for i, metric in enumerate(metrics):
        ax = fig.add_subplot(rows, cols, i + 1)
        for curve in metric["curves"]:
            xs = [p[0] for p in curve["points"]]
            ys = [100.0 * p[1] for p in curve["points"]]
            label = site_label if curve["source"] == "site" else legend_label("cluster", curve["source"])
            (line,) = ax.step(xs, ys, where="post", label=label, color=colour("cluster", curve["source"]),
                              **{"linewidth": 1.2, **_STYLE.get(curve["source"], {})})
            line.set_gid(gid("cluster", curve["source"]))
        ax.set_title(f"{metric['label']} ({metric['unit']})", fontsize=8)
        ax.set_ylabel("CDF (%)", fontsize=7)
        ax.set_ylim(0, 100)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6)
    if not metrics:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "no samples", ha="center")
    fig.suptitle("Utilisation and power beside Acme (Figs 7-9)", fontsize=9)
    fig.text(0.01, 0.005, beside_acme.get("credit", ""), fontsize=5, color="grey")
    fig.tight_layout(rect=(0, 0.02, 1, 0.97))
    return fig
