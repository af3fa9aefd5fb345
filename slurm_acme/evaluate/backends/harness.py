"""The external tools inside the evaluation's jobs: a GPU trial and its CPU scoring.

The argv of each step comes from :func:`infer_argv` / :func:`score_argv`, the
same functions ``seval --dry-run`` prints. The tool's own output goes to a log
file under ``<run_dir>/logs/`` (its tail is echoed to the job's log when it
fails) and its result files under ``<run_dir>/pred/<trial>/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurm_acme.evaluate.backends import external as ext
from slurm_acme.evaluate.backends.catalogue import lm_eval_include_paths, offline_env
from slurm_acme.evaluate.spec import RunSpec, TrialSpec


def work_dir(run_dir: Path, trial: TrialSpec) -> Path:
    return run_dir / "pred" / trial.trial_id


def tool_log(run_dir: Path, trial: TrialSpec, step: str) -> Path:
    """Where the tool's own output for one step of one trial goes."""
    return run_dir / "logs" / f"{trial.trial_id}-{step}.log"


def _tool(spec: RunSpec) -> ext.ToolRun:
    if spec.tool is None:
        raise ext.TrialFailed(f"run spec of {spec.eval_id} names backend {spec.backend} but no tool settings")
    return spec.tool


def _tasks(spec: RunSpec, trial: TrialSpec) -> list[str]:
    return [spec.datasets[s.dataset].tool_task for s in trial.shards]


def infer_argv(spec: RunSpec, run_dir: Path, trial: TrialSpec, model_path: str | Path, *, gpus: int) -> list[str]:
    """The GPU trial's command: lm-eval whole, or OpenCompass ``--mode infer``."""
    tool = _tool(spec)
    if spec.backend == "opencompass":
        return ext.opencompass_argv(tool, model_path, _tasks(spec, trial), work_dir(run_dir, trial),
                                    mode="infer", gpus=gpus)
    return ext.lm_eval_argv(tool, model_path, _tasks(spec, trial), work_dir(run_dir, trial), gpus=gpus,
                            include_path=lm_eval_include(tool, run_dir))


def lm_eval_include(tool: ext.ToolRun, run_dir: Path) -> str:
    """lm-eval's one ``--include_path``: the shipped task folder, or, when the user has a
    task folder too, the union of both that :func:`prepare_run_dir` builds (lm-eval's
    CLI takes a single path; its Python API takes a list)."""
    paths = lm_eval_include_paths(tool.task_paths)
    return paths[0] if len(paths) == 1 else str(run_dir / UNION_DIR)


UNION_DIR = "lm_eval_tasks"


def build_task_union(sources: list[str], dest: Path) -> None:
    """One folder holding every source's tree: real directories, files as symlinks
    (lm-eval's index does not descend into symlinked directories; ``include:`` and
    ``!function`` resolve beside the link). The last source goes first, because within
    one folder lm-eval keeps the first task of a name, and a user's task must win."""
    for rank, source in enumerate(reversed(sources)):
        root = Path(source)
        top = dest / f"{rank}-{root.name}"
        for path in sorted(root.rglob("*")):
            target = top / path.relative_to(root)
            if path.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            elif path.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(path.resolve())


def prepare_run_dir(spec: RunSpec, run_dir: Path) -> None:
    """What the tool needs in the run dir before any job starts (the lm-eval task union)."""
    if spec.backend == "lm-eval" and spec.tool is not None and spec.tool.task_paths:
        build_task_union(lm_eval_include_paths(spec.tool.task_paths), run_dir / UNION_DIR)


def score_argv(spec: RunSpec, run_dir: Path, trial: TrialSpec) -> list[str] | None:
    """The CPU scoring job's command (OpenCompass ``--mode eval``); None for lm-eval,
    which scored in the GPU job and leaves only its files to read."""
    if spec.backend != "opencompass":
        return None
    return ext.opencompass_argv(_tool(spec), spec.checkpoint, _tasks(spec, trial), work_dir(run_dir, trial),
                                mode="eval", gpus=0)


def run_tool(argv: list[str], log: Path) -> tuple[float, float]:
    """Run the tool with its output in ``log``; (start, end) epoch seconds. Non-zero exit fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"seval-worker: {' '.join(argv)}\nseval-worker: tool log {log}", file=sys.stderr, flush=True)
    began = time.time()
    with log.open("wb") as out:
        try:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=offline_env(), check=False)
        except OSError as exc:
            raise ext.TrialFailed(f"cannot run {argv[0]}: {exc.strerror}") from None
    ended = time.time()
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
        print("\n".join(tail), file=sys.stderr, flush=True)
        raise ext.TrialFailed(f"{Path(argv[0]).name} exited {proc.returncode} (log: {log})")
    return began, ended


def run_external_trial(spec: RunSpec, run_dir: Path, trial: TrialSpec, model_path: Path) -> dict[str, Any]:
    """Inference (and, for lm-eval, metrics) of one trial; returns its timing record."""
    gpus = ext.allocation_gpus()
    argv = infer_argv(spec, run_dir, trial, model_path, gpus=gpus)
    log = tool_log(run_dir, trial, "infer")
    began, ended = run_tool(argv, log)
    out = work_dir(run_dir, trial)
    if spec.backend == "opencompass":
        abbr = ext.opencompass_abbr(model_path)
        per_abbr = ext.check_opencompass_inference(
            out, abbr, [p for s in trial.shards for p in spec.datasets[s.dataset].tool_parts])
        counts = {s.key: sum(per_abbr[p] for p in spec.datasets[s.dataset].tool_parts) for s in trial.shards}
        _, inference = ext.opencompass_infer_times(out, abbr)
        inference = min(inference, ended - began)
    else:
        scores = ext.read_lm_eval_results(out, _tasks(spec, trial), log=str(log))
        counts = {s.key: scores[spec.datasets[s.dataset].tool_task].n for s in trial.shards}
        first = ext.lm_eval_first_request_ts(log.read_text(encoding="utf-8", errors="replace"))
        inference = ended - max(began, first) if first else ended - began
    seconds = ext.share(inference, counts)
    return {"trial": trial.trial_id, "started": began, "ended": ended, "load_s": (ended - began) - inference,
            "gpus": gpus, "argv": argv, "tool_log": str(log),
            "shards": {k: {"examples": counts[k], "seconds": seconds[k]} for k in counts}}


def score_external_trial(spec: RunSpec, run_dir: Path, trial: TrialSpec) -> list[dict[str, Any]]:
    """The trial's results as the tool wrote them; OpenCompass scores here (``--mode eval``)."""
    out = work_dir(run_dir, trial)
    began = time.monotonic()
    argv = score_argv(spec, run_dir, trial)
    if argv is not None:
        run_tool(argv, tool_log(run_dir, trial, "eval"))
        parts: Mapping[str, tuple[str, ...]] = {s.dataset: spec.datasets[s.dataset].tool_parts for s in trial.shards}
        scores = ext.read_opencompass_results(out, ext.opencompass_abbr(spec.checkpoint), parts)
        by_dataset = {name: (s.metric, s.value / 100.0, s.n) for name, s in scores.items()}
    else:
        found = ext.read_lm_eval_results(out, _tasks(spec, trial))
        by_dataset = {s.dataset: (found[spec.datasets[s.dataset].tool_task].metric,
                                  found[spec.datasets[s.dataset].tool_task].value,
                                  found[spec.datasets[s.dataset].tool_task].n) for s in trial.shards}
    cpu = ext.share(time.monotonic() - began, {name: n for name, (_, _, n) in by_dataset.items()})
    return [{"dataset": s.dataset, "key": s.key, "metric": by_dataset[s.dataset][0],
             "score": by_dataset[s.dataset][1], "correct": by_dataset[s.dataset][1] * by_dataset[s.dataset][2],
             "total": by_dataset[s.dataset][2], "cpu_s": cpu[s.dataset]} for s in trial.shards]


def write_failure(run_dir: Path, trial: TrialSpec, step: str, message: str) -> None:
    """A failed step leaves a note that ``seval status`` shows (job log, tool log, reason)."""
    folder = run_dir / "failed"
    folder.mkdir(exist_ok=True)
    note: Mapping[str, Any] = {"trial": trial.trial_id, "step": step, "message": message,
                               "job_id": os.environ.get("SLURM_JOB_ID", ""),
                               "tool_log": str(tool_log(run_dir, trial, "infer" if step == "trial" else "eval"))}
    (folder / f"{trial.trial_id}-{step}.json").write_text(json.dumps(note), encoding="utf-8")
