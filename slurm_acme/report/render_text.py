"""``--format text``: the report for a terminal (or a file), findings first.

Every table is one of :mod:`slurm_acme.report.views`, drawn with rich at the
terminal's width (100 columns when not a terminal). Tables are shaped to fit
100 columns; a header is never cut (headers fold onto a second line before
any is shortened, and the CDF tables, one row per point, stay in HTML/JSON).
"""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.table import Table

from slurm_acme.report.findings import CITATIONS
from slurm_acme.report.labels import SECTION_TITLES
from slurm_acme.report.model import SECTIONS, Report
from slurm_acme.report.views import TableView, section_tables


def rich_table(view: TableView, title: str = "") -> Table:
    table = Table(title=title or view.title or None, title_justify="left", title_style="bold",
                  box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True,
                  caption=view.note or None,
                  caption_justify="left", caption_style="dim")
    for i, name in enumerate(view.columns):
        table.add_column(name, justify="left" if i < view.text_columns else "right", overflow="fold")
    for i, row in enumerate(view.rows):
        if i and i in view.groups:
            table.add_section()
        table.add_row(*row)
    return table


def _findings(console: Console, report: Report) -> None:
    """One line per finding (``?`` where its data is missing), Acme's figure
    and the source under it, indented; long lines wrap, never cut."""
    console.print("[bold underline]Findings[/bold underline] (this site, beside Acme)")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=1, no_wrap=True)
    grid.add_column(overflow="fold")
    for f in report.findings:
        grid.add_row("-" if f["available"] else "?", f"{f['text']}\n[dim]{f['acme_text']} ({f['source']})[/dim]")
    console.print(grid, highlight=False)
    sources = Table.grid(padding=(0, 1))
    sources.add_column(no_wrap=True)
    sources.add_column(overflow="fold")
    for i, full in enumerate(CITATIONS.values()):
        sources.add_row("[dim]Sources:[/dim]" if i == 0 else "", f"[dim]{full}[/dim]")
    console.print(sources, highlight=False)


#: Sections that only restate "no jobs" when the period has none.
JOB_SECTIONS = ("overview", "trends", "workload", "durations", "scale", "states")


def render_text(report: Report, width: int = 100) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None,
                      legacy_windows=False, soft_wrap=False)
    o = report.overview
    scope = ", ".join(f"{k} {o[k]}" for k in ("cluster", "user", "type") if o[k]) or "all jobs"
    console.print(f"sacme report: {o['period']['label']} ({scope})", highlight=False)
    if report.empty:
        console.print(f"Empty report: no jobs were submitted in {o['period']['label']} ({scope}).",
                      highlight=False)
    console.print()
    _findings(console, report)
    for section in SECTIONS[1:]:
        if report.empty and section in JOB_SECTIONS:
            continue
        views = [v for v in section_tables(report, section) if not v.long]
        if not views:
            continue
        console.print()
        console.print(f"[bold underline]{SECTION_TITLES[section]}[/bold underline]")
        for view in views:
            console.print(rich_table(view))
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())
