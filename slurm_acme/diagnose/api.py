"""``diagnose(lines) -> Diagnosis``: the one function the supervisor calls.

Rules first (specific, explainable, instant). When no rule fires, the nearest
labelled cases propose a category with a confidence; below the threshold the
answer is ``unknown``. When an LLM agent is configured, it gets the last word
on what rules and retrieval could not name, and a rule it proposes joins the
book only if it passes :func:`slurm_acme.diagnose.learning.validate_proposal`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from slurm_acme.diagnose.model import Diagnosis
from slurm_acme.diagnose.rules import RuleBook

if TYPE_CHECKING:
    from slurm_acme.diagnose.llm import LLMAgent
    from slurm_acme.diagnose.retrieval import CaseIndex
    from slurm_acme.diagnose.streaming import StreamingDiagnoser

#: Lines fed to the engine per batch when diagnosing an iterable of strings.
BATCH_LINES = 4096


@functools.lru_cache(maxsize=1)
def default_rulebook() -> RuleBook:
    """The shipped rule book (no site files), loaded once per process."""
    return RuleBook.load()


def feed_lines(diagnoser: StreamingDiagnoser, lines: Iterable[str]) -> None:
    """Feed an iterable of text lines in batches (the fast path)."""
    batch: list[bytes] = []
    for line in lines:
        batch.append(line.rstrip("\r\n").encode("utf-8", errors="replace"))
        if len(batch) >= BATCH_LINES:
            diagnoser.feed_bytes(batch)
            batch = []
    diagnoser.feed_bytes(batch)


def diagnose(
    lines: Iterable[str],
    *,
    rulebook: RuleBook | None = None,
    cases: CaseIndex | Sequence | None = None,
    llm: LLMAgent | None = None,
    threshold: float | None = None,
    task_nodes: Mapping[int, str] | None = None,
) -> Diagnosis:
    """Diagnose a failed run from its log lines (all ranks, any order of arrival).

    ``cases`` is a :class:`~slurm_acme.diagnose.retrieval.CaseIndex` or a
    sequence of labelled cases; None uses the shipped labelled corpus.
    ``llm`` is an :class:`~slurm_acme.diagnose.llm.LLMAgent` or None (off).
    ``task_nodes`` maps global rank -> node (the step's task layout), so a
    rank's failure names the node it ran on; ``Diagnosis.node`` is that
    culprit, or None when the log implicates no node.
    """
    from slurm_acme.diagnose.streaming import StreamingDiagnoser

    diagnoser = StreamingDiagnoser(rulebook, task_nodes=task_nodes)
    feed_lines(diagnoser, lines)
    return conclude(diagnoser, cases=cases, llm=llm, threshold=threshold)


def conclude(
    diagnoser: StreamingDiagnoser,
    *,
    cases: CaseIndex | Sequence | None = None,
    llm: LLMAgent | None = None,
    threshold: float | None = None,
) -> Diagnosis:
    """Rules, then retrieval, then the LLM agent, on what ``diagnoser`` saw."""
    verdict = diagnoser.rule_result()
    if not verdict.is_unknown or diagnoser.lines_seen == 0:
        return verdict
    from slurm_acme.diagnose.retrieval import as_index, default_threshold, query_text

    index = as_index(cases)
    text = query_text(diagnoser)
    if not text.strip():
        return verdict
    retrieved = index.propose(
        text, threshold=default_threshold(index.kind) if threshold is None else threshold,
        rulebook=diagnoser.rulebook,
    )
    if not retrieved.is_unknown or llm is None:
        return retrieved
    return llm.diagnose(text, index.nearest(text, k=3), rulebook=diagnoser.rulebook) or retrieved


def scan_file(
    path: str, *, rulebook: RuleBook | None = None, progress: Callable[[int], None] | None = None,
    task_nodes: Mapping[int, str] | None = None,
) -> StreamingDiagnoser:
    """Stream a log file of any size through a fresh diagnoser (bounded memory).

    ``progress`` is called after each chunk with the bytes read so far.
    """
    from slurm_acme.diagnose.reader import iter_batches, open_log
    from slurm_acme.diagnose.streaming import StreamingDiagnoser

    diagnoser = StreamingDiagnoser(rulebook, task_nodes=task_nodes)
    with open_log(path) as handle:
        for lines, keys in iter_batches(handle):
            diagnoser.feed_bytes(lines, keys)
            if progress is not None:
                progress(handle.tell())
    return diagnoser


def diagnose_file(
    path: str,
    *,
    rulebook: RuleBook | None = None,
    cases: CaseIndex | Sequence | None = None,
    llm: LLMAgent | None = None,
    threshold: float | None = None,
    progress: Callable[[int], None] | None = None,
    task_nodes: Mapping[int, str] | None = None,
) -> tuple[Diagnosis, StreamingDiagnoser]:
    """:func:`diagnose` for a file path; also returns the diagnoser (compressed log, stats)."""
    diagnoser = scan_file(path, rulebook=rulebook, progress=progress, task_nodes=task_nodes)
    return conclude(diagnoser, cases=cases, llm=llm, threshold=threshold), diagnoser
