"""``--format html``: one self-contained page (PNG figures inlined as base64).

The page reads like the paper: a header, a table of contents, the findings
(this site beside Acme, with sources), then one ``<section id=KEY>`` per
section with its figures first and its tables after, the long ones (CDF
points) last. Everything fits a 1280 px window without horizontal scrolling:
figures scale down, wide tables are transposed (compare) and cells wrap.
A few lines of script mark ``<body data-plots-loaded=N>`` once every image
has decoded, so a headless browser can prove the page renders.
"""

from __future__ import annotations

import base64
import html
from datetime import datetime, timezone

from slurm_acme.report.findings import CITATIONS
from slurm_acme.report.labels import SECTION_TITLES, fmt
from slurm_acme.report.model import SECTIONS, Report
from slurm_acme.report.plots import FIGURE_SECTIONS, FIGURE_TITLES
from slurm_acme.report.views import TableView, section_tables

_STYLE = """
*, *::before, *::after { box-sizing: border-box; }
html { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1f; background: #fff; }
body { margin: 0 auto; padding: 1.2em 24px 3em; max-width: 1240px; line-height: 1.4; }
h1 { font-size: 1.6em; margin: 0 0 0.2em; }
h2 { font-size: 1.25em; margin: 1.6em 0 0.6em; padding-bottom: 0.2em; border-bottom: 1px solid #ddd; }
p.meta { color: #555; margin: 0 0 1em; }
nav#toc { background: #f6f7f9; border: 1px solid #e3e5e8; border-radius: 6px; padding: 0.5em 1em; }
nav#toc h2 { font-size: 1em; margin: 0.2em 0 0.4em; border: 0; padding: 0; }
nav#toc ol { columns: 3 14em; margin: 0; padding-left: 1.4em; }
nav#toc a { text-decoration: none; color: #0b5cad; }
nav#toc .empty { color: #888; }
.figures { display: flex; flex-wrap: wrap; gap: 12px 16px; margin: 0.4em 0 0.8em; }
figure { margin: 0; flex: 0 1 auto; max-width: 100%; }
figure img.plot { display: block; width: 100%; height: auto; }
figcaption { font-size: 0.85em; color: #555; }
.tables { display: flex; flex-wrap: wrap; gap: 0.6em 2em; align-items: flex-start; }
table { border-collapse: collapse; font-size: 0.88em; max-width: 100%; margin: 0.3em 0 0.6em; }
caption { text-align: left; font-weight: 600; margin: 0.2em 0 0.3em; }
th, td { border-bottom: 1px solid #e3e5e8; padding: 3px 10px; text-align: right; vertical-align: top;
         overflow-wrap: anywhere; }
th { background: #f6f7f9; font-weight: 600; }
th.t, td.t { text-align: left; }
tr.group td { border-top: 2px solid #999; font-weight: 600; }
p.note, p.tnote { color: #666; font-size: 0.85em; margin: 0.2em 0 0.6em; max-width: 60em; }
table.findings { width: 100%; font-size: 0.95em; }
table.findings td, table.findings th { text-align: left; }
table.findings td:first-child { width: 46%; }
table.findings tr.missing td:first-child { color: #8a5a00; }
ol.sources { font-size: 0.85em; color: #555; }
"""

_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.querySelectorAll('img.plot'));
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute('data-plots-loaded', String(ok));
});
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


_TEXT = " class='t'"


def table_html(view: TableView, css: str = "") -> str:
    head = "".join(f"<th scope='col'{_TEXT if j < view.text_columns else ''}>{_e(c)}</th>"
                   for j, c in enumerate(view.columns))
    body = []
    for i, row in enumerate(view.rows):
        cls = " class='group'" if i in view.groups else ""
        cells = "".join(f"<td{_TEXT if j < view.text_columns else ''}>{_e(c)}</td>" for j, c in enumerate(row))
        body.append(f"<tr{cls}>{cells}</tr>")
    caption = f"<caption>{_e(view.title)}</caption>" if view.title else ""
    klass = f" class='{css}'" if css else ""
    note = f"<p class='tnote'>{_e(view.note)}</p>" if view.note else ""
    return f"<div class='table'><table{klass}>{caption}<thead><tr>{head}</tr></thead>" \
           f"<tbody>{''.join(body)}</tbody></table>{note}</div>"


def _when(ts: float | None, open_end: str) -> str:
    return open_end if ts is None else datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _header(report: Report) -> str:
    o = report.overview
    scope = ", ".join(f"{k} {o[k]}" for k in ("cluster", "user", "type") if o[k]) or "all clusters, all jobs"
    title = f"sacme report: {o['period']['label']}"
    since, until = o["period"]["since"], o["period"]["until"]
    period = ("every job in the store" if since is None and until is None
              else f"jobs submitted from {_when(since, 'the start')} to {_when(until, 'now')}")
    return (f"<header><h1>{_e(title)}</h1><p class='meta'>{_e(scope)} &middot; {_e(period)} &middot; "
            f"{_e(fmt(o['jobs'], 'count'))} jobs, {_e(fmt(o['gpu_jobs'], 'count'))} GPU jobs</p></header>")


def _toc(report: Report) -> str:
    items = []
    for section in SECTIONS:
        present = getattr(report, section) is not None
        title = _e(SECTION_TITLES[section])
        items.append(f"<li><a href='#{section}'>{title}</a></li>" if present
                     else f"<li class='empty'><a href='#{section}'>{title}</a> (no data)</li>")
    return f"<nav id='toc'><h2>Contents</h2><ol>{''.join(items)}</ol></nav>"


def _findings(report: Report) -> str:
    rows = []
    for f in report.findings:
        cls = "" if f["available"] else " class='missing'"
        rows.append(f"<tr{cls} data-key='{_e(f['key'])}'><td>{_e(f['text'])}</td>"
                    f"<td>{_e(f['acme_text'].removeprefix('Acme: '))}</td><td>{_e(f['source'])}</td></tr>")
    table = ("<table class='findings'><thead><tr><th scope='col'>This site</th><th scope='col'>Acme</th>"
             f"<th scope='col'>Source</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
    sources = "".join(f"<li>{_e(full)}</li>" for full in CITATIONS.values())
    return (f"<section id='findings'><h2>{_e(SECTION_TITLES['findings'])}</h2>{table}"
            f"<p class='tnote'>Sources</p><ol class='sources'>{sources}</ol></section>")


def _png_width(png: bytes) -> int:
    """The pixel width in a PNG's header (a figure is shown at most that wide)."""
    return int.from_bytes(png[16:20], "big")


def _figures(section: str, pngs: dict[str, bytes]) -> str:
    out = []
    for name, png in pngs.items():
        if FIGURE_SECTIONS.get(name) != section:
            continue
        encoded = base64.b64encode(png).decode("ascii")
        title = _e(FIGURE_TITLES.get(name, name))
        out.append(f"<figure style='flex-basis: {_png_width(png)}px'><img class='plot' id='plot-{_e(name)}' "
                   f"alt='{title}' src='data:image/png;base64,{encoded}'><figcaption>{title}</figcaption></figure>")
    return f"<div class='figures'>{''.join(out)}</div>" if out else ""


def _section(report: Report, section: str, pngs: dict[str, bytes]) -> str:
    parts = [f"<section id='{section}'><h2>{_e(SECTION_TITLES[section])}</h2>"]
    views = section_tables(report, section)
    if getattr(report, section) is None:
        parts.append("<p class='note'>No data for this section in this period.</p>")
    short = [v for v in views if not v.long]
    long = [v for v in views if v.long]
    parts.append(_figures(section, pngs))
    if short:
        parts.append("<div class='tables'>" + "".join(table_html(v) for v in short) + "</div>")
    if long:
        parts.append("<div class='tables long'>" + "".join(table_html(v) for v in long) + "</div>")
    parts.append("</section>")
    return "".join(parts)


def render_html(report: Report, pngs: dict[str, bytes]) -> str:
    o = report.overview
    title = f"sacme report: {o['period']['label']}"
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
             f"<title>{_e(title)}</title><style>{_STYLE}</style><script>{_SCRIPT}</script></head><body>",
             _header(report)]
    if report.empty:
        parts.append(f"<p class='note' id='empty'>Empty report: no jobs were submitted in "
                     f"{_e(o['period']['label'])}.</p>")
    parts.append(_toc(report))
    parts.append(_findings(report))
    for section in SECTIONS[1:]:
        parts.append(_section(report, section, pngs))
    parts.append("</body></html>\n")
    return "".join(parts)
