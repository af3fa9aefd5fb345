"""``--format html``: one self-contained page (PNG figures inlined as base64).

Each section is a ``<section id="NAME">`` with its tables (the CSV rows of
that section) and its figures as ``<img class="plot" id="plot-NAME">``. A few
lines of script mark ``<body data-plots-loaded=N>`` once every image has
decoded, so a headless browser can prove the page renders.
"""

from __future__ import annotations

import base64
import html
from datetime import datetime, timezone
from typing import Any

from slurm_acme.report.model import SECTIONS, Report
from slurm_acme.report.plots import FIGURE_SECTIONS
from slurm_acme.report.render_text import fmt

_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
section { margin-bottom: 2em; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
td:first-child, th:first-child { text-align: left; }
caption { text-align: left; font-weight: bold; margin: 0.6em 0 0.2em; }
img.plot { display: block; margin: 0.5em 0; max-width: 100%; }
.note { color: #666; }
"""

_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.querySelectorAll('img.plot'));
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute('data-plots-loaded', String(ok));
});
"""


def _cell(key: str, value: object) -> str:
    if isinstance(value, float) and ("share" in key or "rate" in key):
        return fmt(value, "share")
    if isinstance(value, bool):
        return str(value).lower()
    return fmt(value) if isinstance(value, float) or value is None else str(value)


def _grid(title: str, rows: list[tuple[str, dict[str, Any]]], label: str = "") -> str:
    """A table: one row per ``(label, {column: value})``; columns of the first row."""
    if not rows:
        return ""
    columns = list(rows[0][1])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in [label, *columns])
    body = "".join(
        "<tr><td>" + html.escape(name) + "</td>"
        + "".join(f"<td>{html.escape(_cell(c, values.get(c)))}</td>" for c in columns) + "</tr>"
        for name, values in rows
    )
    caption = f"<caption>{html.escape(title)}</caption>" if title else ""
    return f"<table>{caption}<tr>{head}</tr>{body}</table>"


def _pairs(title: str, data: dict[str, Any]) -> str:
    return _grid(title, [(k, {"value": v}) for k, v in data.items()
                         if v is None or isinstance(v, (int, float, str))], "figure")


def _beside_acme(beside: dict[str, Any]) -> str:
    rows = [(f"{r['label']} ({r['unit']})", {"this site": r["site"], **r["acme"]})
            for r in (*beside["medians"], *beside["shares"])]
    return (_grid("beside Acme (Figs 7-9): medians and key shares", rows, "figure")
            + f"<p class='note'>{html.escape(beside['credit'])}</p>")


def _when(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _overview(o: dict[str, Any]) -> str:
    period = o["period"]
    flat = {"period": period["label"], "from": _when(period["since"]), "until": _when(period["until"]),
            **{k: v for k, v in o.items() if k != "period"}}
    return _pairs("", flat)


def _durations(d: dict[str, Any]) -> str:
    parts = []
    for metric, title in (("run_time", "run time (s)"), ("queue", "queue delay (s)")):
        rows = [(group, {k: v for k, v in blocks[metric].items() if k != "cdf"}) for group, blocks in d.items()]
        parts.append(_grid(f"GPU-job {title}: percentiles", rows, "type"))
        cdf_rows = [(group, {f"<=2^{k}s": point["share"] for k, point in enumerate(blocks[metric]["cdf"])})
                    for group, blocks in d.items()]
        parts.append(_grid(f"GPU-job {title}: CDF at 2^k seconds (share)", cdf_rows, "type"))
    return "".join(parts)


def _section_tables(name: str, data: Any) -> str:
    if name == "overview":
        return _overview(data)
    if name == "workload":
        rows = [(t, {"gpu_jobs": w["gpu_jobs"], "gpu_job_share": w["gpu_job_share"],
                     "gpu_time_share": w["gpu_time_share"],
                     **{f"GPUs {k}": v for k, v in w["gpu_demand"].items()}}) for t, w in data.items()]
        return _grid("GPU jobs per workload type", rows, "type")
    if name == "durations":
        return _durations(data)
    if name == "scale":
        rows = [(f"<= {int(p['gpus'])}", {"gpu_time_share": p["share"]}) for p in data["gpu_time_cdf"]]
        rows.append((">= 256", {"gpu_time_share": data["share_gpu_time_ge_256"]}))
        return _grid("GPU time by GPUs per job (cumulative)", rows, "GPUs per job")
    if name == "states":
        rows = [(s, {"share by count": data["by_count"][s], "share by GPU time": data["by_gpu_time"][s]})
                for s in data["by_count"]]
        return _grid(f"{fmt(data['gpu_jobs'], 'int')} GPU jobs", rows, "state")
    if name == "failures":
        cat = [(f"{r['origin']} / {r['category']}", {k: v for k, v in r.items() if k not in ("origin", "category")})
               for r in data["by_category"]]
        org = [(r["origin"], {k: v for k, v in r.items() if k != "origin"}) for r in data["by_origin"]]
        return _grid("by category", cat, "origin / category") + _grid("by origin", org, "origin")
    if name == "compare":
        return _grid("this cluster beside AcmeTrace (Seren, Kalos), Philly, Helios, PAI",
                     [(str(r["cluster"]), {k: v for k, v in r.items() if k not in ("cluster", "source")})
                      for r in data], "cluster")
    if name == "utilisation" and data.get("beside_acme"):
        return _pairs("", data) + _beside_acme(data["beside_acme"])
    return _pairs("", data)


def render_html(report: Report, pngs: dict[str, bytes]) -> str:
    data = report.to_json()
    o = report.overview
    title = f"sacme report: {o['period']['label']}"
    parts = [(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body>"),
             f"<h1>{html.escape(title)}</h1>"]
    if report.empty:
        parts.append(f"<p class='note' id='empty'>Empty report: no jobs were submitted in "
                     f"{html.escape(o['period']['label'])}.</p>")
    for section in SECTIONS:
        parts.append(f"<section id='{section}'><h2>{section}</h2>")
        if data[section] is None:
            parts.append("<p class='note'>No data for this section.</p>")
        else:
            parts.append(_section_tables(section, data[section]))
        for name, png in pngs.items():
            if FIGURE_SECTIONS[name] == section:
                encoded = base64.b64encode(png).decode("ascii")
                parts.append(f"<img class='plot' id='plot-{name}' alt='{name}' "
                             f"src='data:image/png;base64,{encoded}'>")
        parts.append("</section>")
    parts.append("</body></html>\n")
    return "".join(parts)
