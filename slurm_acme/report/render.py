"""One report, one output format: the dispatch behind ``sacme report --format``.

The CLI parses flags and calls :func:`render`; which renderer runs, and
whether figures are drawn, is decided here. Renderers are imported on use so a
text report never imports matplotlib.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_acme.report.model import Report

FORMATS = ("text", "json", "csv", "html")
#: Terminal width when stdout is not a terminal and ``COLUMNS`` is unset.
DEFAULT_WIDTH = 100


@dataclass(frozen=True)
class Rendered:
    """The report as ``text`` in the chosen format, plus ``pngs`` (figure
    name -> PNG bytes) when figures were asked for or the format embeds them."""

    text: str
    pngs: dict[str, bytes] = field(default_factory=dict)


def render(report: Report, fmt: str, *, plots: bool = False, width: int = DEFAULT_WIDTH) -> Rendered:
    """``fmt`` is one of :data:`FORMATS`; ``width`` is the text format's line width."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)})")
    pngs: dict[str, bytes] = {}
    if plots or fmt == "html":
        from slurm_acme.report.plots import figures

        pngs = figures(report)
    if fmt == "json":
        from slurm_acme.report.render_json import render_json

        return Rendered(render_json(report), pngs)
    if fmt == "csv":
        from slurm_acme.report.render_csv import render_csv

        return Rendered(render_csv(report), pngs)
    if fmt == "html":
        from slurm_acme.report.render_html import render_html

        return Rendered(render_html(report, pngs), pngs)
    from slurm_acme.report.render_text import render_text

    return Rendered(render_text(report, width=width), pngs)
