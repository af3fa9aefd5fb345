"""``sacme import-trace FILE --cluster NAME``: load an AcmeTrace job trace."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from slurm_acme.cli.context import AppContext, pass_app


@click.command("import-trace")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--cluster", required=True, help="Cluster name to file the jobs under (e.g. seren, kalos).")
@click.option("--strict", is_flag=True, help="Abort on the first bad row; nothing is imported.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per file.")
@click.option("--batch-size", default=50_000, show_default=True, type=click.IntRange(min=1))
@pass_app
def import_trace(app: AppContext, files: tuple[str, ...], cluster: str, strict: bool,
                 as_json: bool, batch_size: int) -> None:
    """Import AcmeTrace CSV files (streaming, idempotent, timezones to UTC).

    Bad rows are reported with file, line and column and skipped (counted),
    or abort the whole import with --strict.
    """
    from slurm_acme.ingest.trace import import_trace as run_import

    store = app.store()
    for path in files:
        with _progress_bar(path) as report:
            result = run_import(store, path, cluster=cluster, strict=strict,
                                batch_size=batch_size, progress=report)
        for bad in result.bad:
            click.echo(f"sacme: skipped {bad}", err=True)
        if result.skipped > len(result.bad):
            click.echo(f"sacme: ... and {result.skipped - len(result.bad)} more bad rows", err=True)
        if as_json:
            click.echo(json.dumps(result.to_json()))
        else:
            click.echo(f"{path}: imported {result.rows} jobs into cluster {cluster!r}, "
                       f"skipped {result.skipped} bad rows, {result.seconds:.1f} s")


@contextmanager
def _progress_bar(path: str) -> Iterator[Callable[[int, int], None] | None]:
    """A transient progress bar on a terminal's stderr; nothing (and no rich) when
    stderr is a file, a pipe or a batch job's log, where it would be noise."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TimeRemainingColumn

    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                  TimeRemainingColumn(), transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task(f"import {path}", total=None)

        def report(done: int, total: int, task: TaskID = task) -> None:
            bar.update(task, completed=done, total=total)

        yield report
