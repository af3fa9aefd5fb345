"""The aggregation step: results and measured runtimes from the run dir into the store.

A dataset gets a result only when every one of its shards was scored; its
measured GPU seconds (inference, model loading excluded) and CPU seconds
(scoring) then feed the EWMA priors for this model-size bucket. External tools
report one score per dataset (``score`` in the row): it is stored as written,
and ``n`` is the tool's own sample count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_acme.evaluate.priors import record_measurements
from slurm_acme.evaluate.spec import RunSpec
from slurm_acme.evaluate.states import EvalState, TrialState
from slurm_acme.store import evaluate as store_eval
from slurm_acme.store import open_store


@dataclass
class _Tally:
    metric: str = ""
    correct: float = 0.0
    total: int = 0
    gpu_s: float = 0.0
    cpu_s: float = 0.0
    keys: set[str] = field(default_factory=set)
    scores: list[float] = field(default_factory=list)  # as the tool reported them


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def collect(spec: RunSpec, run_dir: Path) -> tuple[list[store_eval.EvalResult], list[dict[str, Any]], bool]:
    """(complete datasets' results, trial rows, whether everything completed)."""
    tallies: dict[str, _Tally] = {}
    trial_rows = []
    expected: dict[str, set[str]] = {}
    for t in spec.trials:
        for s in t.shards:
            expected.setdefault(s.dataset, set()).add(s.key)
        timing = _read(run_dir / "timing" / f"{t.trial_id}.json") or {}
        scored = _read(run_dir / "score" / f"{t.trial_id}.json") or {}
        gpu_by_key = {k: v["seconds"] for k, v in (timing.get("shards") or {}).items()}
        for row in scored.get("shards") or ():
            tally = tallies.setdefault(row["dataset"], _Tally())
            tally.metric = row["metric"]
            tally.correct += row["correct"]
            tally.total += row["total"]
            tally.cpu_s += row["cpu_s"]
            tally.gpu_s += gpu_by_key.get(row["key"], 0.0)
            tally.keys.add(row["key"])
            if "score" in row:
                tally.scores.append(row["score"])
        failed = any((run_dir / "failed").glob(f"{t.trial_id}-*.json"))
        state = (TrialState.SCORED if scored else TrialState.FAILED if failed
                 else TrialState.INFERRED if timing else TrialState.MISSING)
        trial_rows.append({
            "trial": t.trial_id, "node": spec.nodes[t.node] if t.node < len(spec.nodes) else str(t.node),
            "slot": t.slot, "datasets": json.dumps([s.key for s in t.shards]),
            "job_id": timing.get("job_id") or None, "gpu_start_ts": timing.get("started"),
            "gpu_end_ts": timing.get("ended"), "cpu_start_ts": scored.get("started"),
            "cpu_end_ts": scored.get("ended"), "state": state.value,
            "gpu_s": sum(gpu_by_key.values()) if timing else None, "load_s": timing.get("load_s"),
            "cpu_s": sum(r["cpu_s"] for r in scored.get("shards") or ()) if scored else None,
        })
    results = [store_eval.EvalResult(name, t.metric, _score(t), t.total, t.gpu_s, t.cpu_s)
               for name, t in sorted(tallies.items()) if t.keys == expected.get(name)]
    complete = len(results) == len(expected)
    return results, trial_rows, complete


def _score(t: _Tally) -> float:
    if len(t.scores) == 1:  # one tool-reported score: keep it exactly
        return t.scores[0]
    return t.correct / t.total if t.total else 0.0


def aggregate_run(spec: RunSpec, run_dir: Path) -> None:
    results, trial_rows, complete = collect(spec, run_dir)
    store = open_store(spec.db_url)
    try:
        store_eval.record_trials(store, spec.eval_id, trial_rows)
        store_eval.record_results(store, spec.eval_id, results)
        record_measurements(store, spec.model_size_b, {r.dataset: (r.gpu_s, r.cpu_s) for r in results})
        store_eval.set_run_state(store, spec.eval_id, (EvalState.COMPLETED if complete else EvalState.PARTIAL).value,
                                 finished=True)
    finally:
        store.dispose()
