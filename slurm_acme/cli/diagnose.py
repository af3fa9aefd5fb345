"""``sacme diagnose LOG...`` and ``sacme rules test``: thin layers over slurm_acme.diagnose."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from slurm_acme.cli.context import AppContext, pass_app
from slurm_acme.errors import InputError


def _progress_for(path: str):  # type: ignore[no-untyped-def]
    """A rich progress bar on stderr for big files read from a terminal session."""
    if path == "-":
        return None, None
    size = Path(path).stat().st_size
    if size < (64 << 20) or not sys.stderr.isatty():
        return None, None
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                   TransferSpeedColumn(), console=Console(stderr=True), transient=True)
    task = bar.add_task(Path(path).name, total=size)
    return bar, lambda done: bar.update(task, completed=done)


def _require_text(path: str) -> None:
    """Refuse, before any rule runs, input that is not a text log (never a verdict on it)."""
    from slurm_acme.diagnose.sniff import SAMPLE_BYTES, text_problem

    try:
        if path == "-":
            stdin = sys.stdin.buffer
            peek = getattr(stdin, "peek", None)
            if peek is None:  # not a buffered stream (a test harness): nothing to look at unread
                return
            sample = peek(SAMPLE_BYTES)[:SAMPLE_BYTES]
        else:
            with open(path, "rb") as handle:
                sample = handle.read(SAMPLE_BYTES)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    problem = text_problem(sample)
    if problem is not None:
        raise InputError(f"{path}: not a text log: {problem}; nothing diagnosed")


@click.command("diagnose")
@click.argument("logs", nargs=-1, required=True, metavar="LOG...")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per log (JSON lines) on stdout.")
@click.option("--explain", is_flag=True, help="Also show the rule, the compressed log and compression stats.")
@click.option("--job-id", default=None, help="Job these logs belong to (stored with the diagnosis).")
@click.option("--no-store", is_flag=True, help="Don't open the store: no recording, shipped corpus for retrieval.")
@click.option("--llm/--no-llm", "use_llm", default=None, help="Override [diagnosis.llm] enabled.")
@click.option("--label", "label", default=None, metavar="CATEGORY",
              help="Confirm the failure is CATEGORY: stored as a labelled case, so retrieval knows it next time.")
@click.option("--origin", "label_origin", type=click.Choice(["infrastructure", "framework", "script"]),
              default=None, help="Origin of --label (default: the rule book's for that category).")
@pass_app
def diagnose(app: AppContext, logs: tuple[str, ...], as_json: bool, explain: bool,
             job_id: str | None, no_store: bool, use_llm: bool | None, label: str | None,
             label_origin: str | None) -> None:
    """Diagnose failed runs from their logs: category, origin, action, culprit node.

    Rules first, then the nearest labelled cases, then (if configured) the
    LLM agent. Every diagnosis is stored in the failures table. LOG may be
    '-' for stdin; files of any size are streamed in bounded memory.
    """
    from slurm_acme.diagnose.api import scan_file
    from slurm_acme.diagnose.kit import load_kit
    from slurm_acme.store import failures as db

    for path in logs:
        if path == "-":
            continue
        if not Path(path).is_file():
            problem = "log file not found" if not Path(path).exists() else "not a regular file"
            raise InputError(f"{path}: {problem}")
    for path in logs:
        _require_text(path)
    if label is not None and no_store:
        raise InputError("--label stores the case: it cannot be combined with --no-store")
    store = None if no_store else app.store()
    kit = load_kit(app.config.diagnosis, store, use_llm=use_llm)
    origin = _label_origin(label, label_origin, kit.rulebook) if label is not None else ""
    for path in logs:
        bar, progress = _progress_for(path)
        if bar is not None:
            bar.start()
        try:
            diagnoser = scan_file(path, rulebook=kit.rulebook, progress=progress)
        finally:
            if bar is not None:
                bar.stop()
        if label is not None:
            verdict = _confirmed(store, diagnoser, label, origin, app.config.diagnosis.retrieval, kit.rulebook)
        else:
            verdict = kit.conclude(diagnoser)
        if kit.llm is not None and kit.llm.last_error:
            click.echo(f"sacme: warning: {kit.llm.last_error}", err=True)
        if store is not None:
            db.record_failure(store, verdict.to_dict(), cluster=app.config.cluster.name,
                              job_id=job_id, log_path="<stdin>" if path == "-" else str(Path(path).resolve()))
        _render(path, verdict, diagnoser, kit.rulebook, as_json=as_json, explain=explain)


def _label_origin(label: str, origin: str | None, rulebook) -> str:  # type: ignore[no-untyped-def]
    import re

    from slurm_acme.diagnose.kit import origin_of

    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", label):
        raise InputError(f"--label {label!r}: a category is a plain name such as NetworkError")
    origin = origin or origin_of(label, rulebook)
    if origin is None:
        raise InputError(f"--label {label}: the rule book does not know this category; give --origin")
    return origin


def _confirmed(store, diagnoser, label: str, origin: str, kind: str, rulebook):  # type: ignore[no-untyped-def]
    """The labelled diagnosis; its log joins the store's cases and vector index."""
    from slurm_acme.diagnose.kit import confirm
    from slurm_acme.diagnose.model import Diagnosis
    from slurm_acme.diagnose.retrieval import action_for, query_text

    case_id = confirm(store, query_text(diagnoser), label, origin, kind=kind)
    return Diagnosis(category=label, origin=origin, action=action_for(label, origin, rulebook),
                     confidence=1.0, evidence=(f"labelled by hand; stored as case {case_id}",), source="label")


def _render(path, verdict, diagnoser, rulebook, *, as_json: bool, explain: bool) -> None:  # type: ignore[no-untyped-def]
    stats = diagnoser.compressor.stats
    ratio = diagnoser.compressor.ratio
    rule = next((r for r in rulebook.rules if r.id == verdict.rule_id), None)
    if as_json:
        out = {"log": path, **verdict.to_dict()}
        if explain:
            out["pattern"] = rule.pattern if rule else None
            out["compression"] = {"lines_in": stats.lines_in, "lines_out": stats.lines_out,
                                  "noise_lines": stats.noise_lines, "templates": stats.templates,
                                  "ratio": round(ratio, 2)}
            out["compressed"] = diagnoser.compressed_lines()
        click.echo(json.dumps(out, ensure_ascii=False))
        return
    node = f" node={verdict.node}" if verdict.node else ""
    click.echo(f"{path}: {verdict.category} ({verdict.origin}) -> {verdict.action}{node} "
               f"[{verdict.source}{':' + verdict.rule_id if verdict.rule_id else ''}, "
               f"confidence {verdict.confidence:.2f}]")
    for line in verdict.evidence:
        click.echo(f"    {line}")
    if explain:
        if rule is not None:
            click.echo(f"  rule {rule.id}: /{rule.pattern}/")
        click.echo(f"  compressed {stats.lines_in} lines to {stats.lines_out} "
                   f"(ratio {ratio:.1f}, {stats.noise_lines} noise, {stats.templates} templates):")
        for line in diagnoser.compressed_lines():
            click.echo(f"  | {line}")


@click.group("rules")
def rules() -> None:
    """Inspect and test the failure rule book."""


@rules.command("test")
@click.argument("corpus", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option("--threshold", type=float, default=None, help="Retrieval threshold (default: acme.toml).")
@pass_app
def rules_test(app: AppContext, corpus: str | None, as_json: bool, threshold: float | None) -> None:
    """Accuracy per category and confusions of the rule book on a labelled corpus.

    CORPUS is JSON lines with "category", "origin" and "log" (default: the
    shipped corpus). Retrieval is scored leave-one-out.
    """
    from slurm_acme.diagnose.corpus import load_corpus
    from slurm_acme.diagnose.evaluation import evaluate
    from slurm_acme.diagnose.rules import RuleBook

    cfg = app.config.diagnosis
    cases = load_corpus(corpus)
    from slurm_acme.diagnose.retrieval import DEFAULT_THRESHOLD

    chosen = threshold if threshold is not None else cfg.retrieval_threshold
    report = evaluate(cases, RuleBook.load(cfg.rules), threshold=DEFAULT_THRESHOLD if chosen is None else chosen)
    if as_json:
        click.echo(json.dumps(report.to_dict()))
        return
    _print_report(report)


def _print_report(report) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="rule book on the labelled corpus")
    table.add_column("category")
    table.add_column("rules", justify="right")
    table.add_column("rules+retrieval (LOO)", justify="right")
    combined = report.rules_then_retrieval.per_category
    for category, (ok, n) in sorted(report.rules.per_category.items()):
        table.add_row(category, f"{ok}/{n}", f"{combined[category][0]}/{n}")
    console.print(table)
    for name, score in (("rules", report.rules), ("rules+retrieval (LOO)", report.rules_then_retrieval),
                        ("retrieval only (LOO)", report.retrieval_only)):
        console.print(f"{name}: category {score.category_accuracy:.3f}, origin {score.origin_accuracy:.3f}, "
                      f"unknown {score.unknown}/{score.total}")
    for rule_id, case_id in report.prefilter_misses:
        console.print(f"[yellow]warning:[/] rule {rule_id} matches case {case_id} on a line without any "
                      "prefilter keyword, so it never fires; add a keyword to its file's prefilter list")
    if report.rules.confusions:
        console.print("confusions (label -> rules said):")
        for (label, predicted), count in report.rules.confusions.most_common():
            console.print(f"  {label} -> {predicted}: {count}")


@rules.command("list")
@pass_app
def rules_list(app: AppContext) -> None:
    """The rule book in order (shipped, then site files on top)."""
    from slurm_acme.diagnose.rules import RuleBook

    book = RuleBook.load(app.config.diagnosis.rules)
    for index, rule in enumerate(book.rules):
        click.echo(f"{index:3d} {rule.id:28s} {rule.category:20s} {rule.origin:15s} {rule.action}")
