"""``--format html``: one self-contained page (PNG figures inlined as base64).

Each section is a ``<section id="NAME">`` with its tables (the CSV rows of
that section) and its figures as ``<img class="plot" id="plot-NAME">``. A few
lines of script mark ``<body data-plots-loaded=N>`` once every image has
decoded, so a headless browser can prove the page renders.
"""

from __future__ import annotations

import base64
import html

from slurm_acme.report.model import SECTIONS, Report
from slurm_acme.report.plots import FIGURE_SECTIONS
from slurm_acme.report.render_csv import flatten
from slurm_acme.report.render_text import fmt

_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
section { margin-bottom: 2em; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
td:first-child, th:first-child { text-align: left; }
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


def _table(rows: list[tuple[str, object]]) -> str:
    cells = "".join(
        f"<tr><td>{html.escape(key)}</td><td>{html.escape(_cell(key, value))}</td></tr>"
        for key, value in rows
    )
    return f"<table><tr><th>figure</th><th>value</th></tr>{cells}</table>"


def _cell(key: str, value: object) -> str:
    if isinstance(value, float) and ("share" in key or "rate" in key):
        return fmt(value, "share")
    if isinstance(value, bool):
        return str(value).lower()
    return fmt(value) if isinstance(value, float) or value is None else str(value)


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
            parts.append(_table(list(flatten(data[section]))))
        for name, png in pngs.items():
            if FIGURE_SECTIONS[name] == section:
                encoded = base64.b64encode(png).decode("ascii")
                parts.append(f"<img class='plot' id='plot-{name}' alt='{name}' "
                             f"src='data:image/png;base64,{encoded}'>")
        parts.append("</section>")
    parts.append("</body></html>\n")
    return "".join(parts)
