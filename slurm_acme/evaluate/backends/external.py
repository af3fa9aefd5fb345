"""OpenCompass and lm-evaluation-harness as backends: their real command lines, and
readers of the files they write.

OpenCompass splits naturally: ``--mode infer`` (GPU) writes
``<work>/<timestamp>/predictions/<model>/<dataset>.json`` and ``--mode eval
--reuse latest`` (CPU) writes ``<work>/<timestamp>/results/<model>/<dataset>.json``
(metric -> value in percent) plus ``summary/summary_<timestamp>.csv``. So a
GPU trial runs ``infer`` and its CPU scoring job runs ``eval``.

lm-eval computes metrics inside its run; ``--output_path DIR`` gives
``DIR/<model>/results_<timestamp>.json`` with ``{"results": {task: {"acc,none": ...}}}``.
The GPU trial runs it whole and the scoring job only reads the results back.

Both tools take whole datasets (no example ranges from the command line), so
plans for these backends never split a dataset.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from slurm_acme.errors import InputError

#: Registry names whose lm-eval task is not simply the lower-cased name.
LM_EVAL_TASKS = {
    "openai_humaneval": "humaneval", "ARC-e": "arc_easy", "ARC-c": "arc_challenge", "BoolQ": "boolq",
    "hellaswag": "hellaswag", "winogrande": "winogrande", "piqa": "piqa", "race-high": "race",
    "triviaqa": "triviaqa", "nq": "nq_open", "truthfulqa": "truthfulqa_mc2", "math": "minerva_math",
    "lambada": "lambada_openai", "commonsense_qa": "commonsense_qa", "openbookqa": "openbookqa",
    "COPA": "copa", "RTE": "rte", "WiC": "wic", "WSC": "wsc", "CB": "cb", "MultiRC": "multirc",
    "ReCoRD": "record", "mbpp": "mbpp", "gsm8k": "gsm8k", "mmlu": "mmlu", "bbh": "bbh",
    "ceval": "ceval-valid", "cmmlu": "cmmlu", "agieval": "agieval", "siqa": "siqa", "xsum": "xsum",
}


def opencompass_config(dataset: str, mode: str) -> str:
    """OpenCompass dataset config name, e.g. ``mmlu_ppl``, ``gsm8k_gen``."""
    return f"{dataset}_{'ppl' if mode == 'ppl' else 'gen'}"


def opencompass_argv(model_path: str | Path, configs: Sequence[str], work_dir: str | Path, *,
                     mode: str, batch_size: int = 8, max_out_len: int = 256) -> list[str]:
    """``opencompass`` for one trial; ``mode`` is ``infer`` (GPU) or ``eval`` (CPU)."""
    if mode not in ("infer", "eval"):
        raise InputError(f"opencompass mode must be infer or eval (got {mode!r})")
    argv = ["opencompass", "--datasets", *configs, "--hf-type", "base", "--hf-path", str(model_path),
            "--work-dir", str(work_dir), "--mode", mode, "--max-num-workers", "1",
            "--hf-num-gpus", "1", "--batch-size", str(batch_size), "--max-out-len", str(max_out_len)]
    if mode == "eval":
        argv += ["--reuse", "latest"]
    return argv


def lm_eval_argv(model_path: str | Path, tasks: Sequence[str], output_path: str | Path, *,
                 batch_size: str = "auto", device: str = "cuda:0") -> list[str]:
    """``lm_eval`` for one trial (inference and metrics in one run)."""
    return ["lm_eval", "--model", "hf", "--model_args", f"pretrained={model_path}",
            "--tasks", ",".join(tasks), "--device", device, "--batch_size", batch_size,
            "--output_path", str(output_path), "--log_samples"]


def _latest_run(work_dir: Path) -> Path:
    runs = sorted(p for p in work_dir.iterdir() if p.is_dir() and (p / "results").is_dir()) \
        if work_dir.is_dir() else []
    if not runs:
        raise InputError(f"{work_dir}: no OpenCompass results/ folder (did --mode eval run?)")
    return runs[-1]


def read_opencompass_results(work_dir: str | Path) -> dict[str, tuple[str, float]]:
    """{dataset abbr: (metric, score in [0, 1])} from the newest timestamped run."""
    out: dict[str, tuple[str, float]] = {}
    for path in sorted((_latest_run(Path(work_dir)) / "results").glob("*/*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for metric, value in doc.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[path.stem] = (metric, float(value) / 100.0)
                break
    return out


def read_lm_eval_results(output_path: str | Path) -> dict[str, tuple[str, float]]:
    """{task: (metric, score)} from the newest ``results_*.json`` under ``output_path``."""
    files = sorted(Path(output_path).rglob("results_*.json"), key=lambda p: p.name)
    if not files:
        raise InputError(f"{output_path}: no lm-eval results_*.json")
    doc = json.loads(files[-1].read_text(encoding="utf-8"))
    out: dict[str, tuple[str, float]] = {}
    for task, metrics in (doc.get("results") or {}).items():
        for key, value in metrics.items():
            if "stderr" in key or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            out[task] = (key.split(",")[0], float(value))
            break
    return out


# --------------------------------------------------------------- worker side

def _names(spec, trial) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(registry name, tool's name) for the trial's datasets."""
    pairs = []
    for shard in trial.shards:
        ds = spec.datasets[shard.dataset]
        tool = (opencompass_config(ds.name, ds.mode) if spec.backend == "opencompass"
                else LM_EVAL_TASKS.get(ds.name, ds.name.lower()))
        pairs.append((ds.name, tool))
    return pairs


def run_external_trial(spec, run_dir: Path, trial, model_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = run_dir / "pred" / trial.trial_id
    names = _names(spec, trial)
    if spec.backend == "opencompass":
        argv = opencompass_argv(model_path, [t for _, t in names], out, mode="infer")
    else:
        argv = lm_eval_argv(model_path, [t for _, t in names], out)
    began = time.time()
    subprocess.run(argv, check=True)
    elapsed = time.time() - began
    shards = {s.key: {"examples": s.stop - s.start, "seconds": elapsed / len(trial.shards)} for s in trial.shards}
    (run_dir / "timing" / f"{trial.trial_id}.json").write_text(json.dumps(
        {"trial": trial.trial_id, "started": began, "ended": time.time(), "load_s": 0.0,
         "model_path": str(model_path), "shards": shards, "argv": argv}))


def score_external_trial(spec, run_dir: Path, trial) -> list[dict]:  # type: ignore[no-untyped-def]
    out = run_dir / "pred" / trial.trial_id
    names = _names(spec, trial)
    if spec.backend == "opencompass":
        subprocess.run(opencompass_argv(spec.checkpoint, [t for _, t in names], out, mode="eval"), check=True)
        scores = read_opencompass_results(out)
    else:
        scores = read_lm_eval_results(out)
    rows = []
    for shard, (name, tool) in zip(trial.shards, names, strict=True):
        found = lookup_score(scores, tool, name)
        metric, value = found or ("missing", 0.0)
        total = shard.stop - shard.start
        rows.append({"dataset": name, "key": shard.key, "metric": metric, "correct": value * total,
                     "total": total if found else 0, "cpu_s": 0.0})
    return rows


def lookup_score(scores: dict[str, tuple[str, float]], tool: str, name: str) -> tuple[str, float] | None:
    """A dataset's score: by the tool's name, the registry name, or the mean of its
    subsets (OpenCompass writes one result per subset, e.g. ``lukaemon_mmlu_anatomy``)."""
    for key in (tool, name):
        if key in scores:
            return scores[key]
    parts = [v for k, v in scores.items() if name.lower() in k.lower()]
    if not parts:
        return None
    return parts[0][0], sum(v for _, v in parts) / len(parts)
