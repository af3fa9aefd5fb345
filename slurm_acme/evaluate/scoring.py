"""Scoring predictions on CPU: exact match, multiple-choice accuracy, code execution.

Runs in the CPU verification jobs, never in a GPU job, so a GPU is never held
while programs execute. No torch import here.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from slurm_acme.evaluate.sandbox import DEFAULT_LIMITS, Limits, code_program, run_program


@dataclass(frozen=True)
class ShardScore:
    dataset: str
    metric: str
    correct: float
    total: int


def _normalise(text: str) -> str:
    return " ".join(text.strip().split()).lower()


def exact_match(prediction: str, answer: str) -> bool:
    """The first line of the prediction equals the answer (case/space-insensitive)."""
    first = prediction.strip().splitlines()[0] if prediction.strip() else ""
    return _normalise(first) == _normalise(answer)


def score_records(dataset: str, kind: str, records: list[dict[str, Any]], *, workers: int = 1,
                  limits: Limits = DEFAULT_LIMITS) -> ShardScore:
    """``kind`` is ``code``, ``ppl`` or ``gen``; records are the backend's prediction rows."""
    if kind == "code":
        def one(rec: dict[str, Any]) -> bool:
            program = code_program(rec["prompt"], rec["prediction"], rec["test"], rec["entry_point"])
            return run_program(program, limits).passed
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            passed = list(pool.map(one, records))
        return ShardScore(dataset, "pass@1", float(sum(passed)), len(records))
    if kind == "ppl":
        return ShardScore(dataset, "acc", float(sum(int(r["prediction"]) == int(r["label"]) for r in records)),
                          len(records))
    return ShardScore(dataset, "em", float(sum(exact_match(r["prediction"], r["answer"]) for r in records)),
                      len(records))


def scoring_workers() -> int:
    """CPUs Slurm gave this scoring task (one per concurrent sandboxed program)."""
    return int(os.environ.get("SLURM_CPUS_PER_TASK") or 1)
