"""lm-evaluation-harness and OpenCompass as backends: their exact command lines, and
readers of the files they write.

**OpenCompass** splits naturally. The GPU trial runs ``--mode infer``, which writes
``<work>/<ts>/predictions/<model abbr>/<dataset abbr>.json`` (or ``_0.json``,
``_1.json``... when it splits a dataset); the CPU scoring job runs ``--mode eval
--reuse latest`` on the same work dir, which writes ``results/<abbr>/<dataset>.json``
(metric -> percent) and ``summary/summary_<ts>.csv`` (the metric it reports per
dataset). The model abbreviation is ``<basename of --hf-path>_hf``: the node-local
copy keeps the checkpoint's folder name, so inference (local copy) and scoring
(shared checkpoint) use the same abbreviation.

**lm-eval** has no way to score logged samples later (``--predict_only`` writes
responses, as strings, and its metrics are computed only inside ``evaluate()``),
so the GPU trial runs it whole with ``--log_samples`` and the CPU job reads
``<out>/<model>/results_<ts>.json`` back: lm-eval scores in the GPU job.

Both take whole datasets only (no example ranges on their command lines), so
plans for these backends never split a dataset. A tool that exits 0 but leaves
no output for a dataset is a failed trial (:class:`TrialFailed`).
"""

from __future__ import annotations

import csv
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from slurm_acme.errors import AcmeError, InputError

EXECUTABLES = {"lm-eval": "lm_eval", "opencompass": "opencompass"}


class TrialFailed(AcmeError):
    """The tool ran but did not produce what the trial needs; names the tool's log."""


@dataclass(frozen=True)
class ToolRun:
    """Everything a worker needs to build one tool's exact command line (part of the run spec)."""

    backend: str
    executable: str
    task_paths: tuple[str, ...] = ()
    model_args: tuple[str, ...] = ()
    num_fewshot: int | None = None
    limit: float | None = None
    batch_size: str = "1"
    max_out_len: int = 256
    allow_code_execution: bool = False


@dataclass(frozen=True)
class ToolScore:
    """One dataset's result as the tool reported it (value as the tool writes it)."""

    metric: str
    value: float
    n: int


# --------------------------------------------------------------- resolution

def resolve_executable(backend: str, configured: str, python: str) -> str:
    """The tool's executable: the configured absolute path, else the one beside ``python``."""
    field = f"evaluate.{backend.replace('-', '_')}.executable"
    if configured:
        path = Path(configured)
        if not path.is_absolute():
            raise InputError(f"{field}: must be an absolute path (got {configured!r})")
    else:
        path = Path(python).parent / EXECUTABLES[backend]
    if not (path.is_file() and os.access(path, os.X_OK)):
        where = f"{field} = {configured!r}" if configured else f"beside the worker's Python {python}"
        raise InputError(f"{backend}: no executable {path} ({where}); install it there "
                         f"(pip install 'slurm-acme[harness]') or set {field} to an absolute path")
    return str(path)


def tool_python(executable: str) -> str:
    """The interpreter of a console script (its ``#!`` line), to ask the tool about itself."""
    try:
        with open(executable, "rb") as fh:
            first = fh.readline().decode("utf-8", "replace").strip()
    except OSError as exc:
        raise InputError(f"{executable}: cannot read: {exc.strerror}") from None
    if first.startswith("#!") and "python" in first:
        return first[2:].strip().split()[0]
    raise InputError(f"{executable}: not a Python console script (first line {first[:60]!r})")


def allocation_gpus(env: Mapping[str, str] | None = None) -> int:
    """GPUs this job step may use, as Slurm exposes them (``CUDA_VISIBLE_DEVICES``)."""
    env = os.environ if env is None else env
    visible = (env.get("CUDA_VISIBLE_DEVICES") or "").strip()
    if not visible or visible in ("NoDevFiles", "-1"):
        return 0
    return len([d for d in visible.split(",") if d.strip()])


def opencompass_abbr(model_path: str | Path) -> str:
    """The model abbreviation OpenCompass derives from ``--hf-path``."""
    return str(model_path).rstrip("/").split("/")[-1] + "_hf"


# ---------------------------------------------------------------- argv

def lm_eval_argv(tool: ToolRun, model_path: str | Path, tasks: Sequence[str], output_path: str | Path,
                 *, gpus: int, include_path: str | None = None) -> list[str]:
    """``lm_eval run`` for one trial: inference and metrics in one run, samples logged.

    ``include_path`` is the one folder lm-eval's CLI takes (seval's shipped tasks, or
    their union with the user's); without it, the user's own folder if any."""
    model_args = ",".join([f"pretrained={model_path}", *tool.model_args])
    argv = [tool.executable, "run", "--model", "hf", "--model_args", model_args, "--tasks", ",".join(tasks),
            "--device", "cuda:0" if gpus else "cpu", "--batch_size", tool.batch_size,
            "--output_path", str(output_path), "--log_samples"]
    for path in [include_path] if include_path else tool.task_paths:
        argv += ["--include_path", path]
    if tool.num_fewshot is not None:
        argv += ["--num_fewshot", str(tool.num_fewshot)]
    if tool.limit is not None:
        argv += ["--limit", _number(tool.limit)]
    if tool.allow_code_execution:
        argv.append("--confirm_run_unsafe_code")
    return argv


def opencompass_argv(tool: ToolRun, model_path: str | Path, configs: Sequence[str], work_dir: str | Path,
                     *, mode: str, gpus: int) -> list[str]:
    """``opencompass`` for one trial; ``mode`` is ``infer`` (GPU job) or ``eval`` (CPU job)."""
    if mode not in ("infer", "eval"):
        raise InputError(f"opencompass mode must be infer or eval (got {mode!r})")
    argv = [tool.executable, "--datasets", *dict.fromkeys(configs), "--hf-type", "base",
            "--hf-path", str(model_path), "--work-dir", str(work_dir), "--mode", mode,
            "--max-num-workers", "1", "--hf-num-gpus", str(gpus), "--batch-size", tool.batch_size,
            "--max-out-len", str(tool.max_out_len)]
    for path in tool.task_paths:
        argv += ["--config-dir", path]
    if tool.model_args:
        argv += ["--model-kwargs", *tool.model_args]
    if mode == "eval":
        argv += ["--reuse", "latest"]
    return argv


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def check_options(tool: ToolRun) -> None:
    """Options a tool's command line cannot take are refused at plan time, by name."""
    name = tool.backend.replace("-", "_")
    if len(tool.task_paths) > 1:
        flag = "--include_path" if tool.backend == "lm-eval" else "--config-dir"
        raise InputError(f"evaluate.{name}.task_paths: {tool.backend} takes one {flag} (got {list(tool.task_paths)})")
    if tool.backend == "opencompass":
        for field in ("num_fewshot", "limit"):
            if getattr(tool, field) is not None:
                raise InputError(f"evaluate.opencompass.{field}: OpenCompass takes it from each dataset config "
                                 "(retriever, reader_cfg test_range), not from its command line")
    if tool.backend == "lm-eval" and tool.batch_size != "auto" and not re.fullmatch(r"auto:\d+|\d+", tool.batch_size):
        raise InputError(f"evaluate.lm_eval.batch_size: expected an integer, auto or auto:N (got {tool.batch_size!r})")
    if tool.backend == "opencompass" and not tool.batch_size.isdigit():
        raise InputError(f"evaluate.opencompass.batch_size: expected an integer (got {tool.batch_size!r})")


# ------------------------------------------------------------- lm-eval output

def _newest(paths: Sequence[Path]) -> Path | None:
    return max(paths, key=lambda p: p.name) if paths else None


def _lm_eval_leaves(doc: dict, task: str) -> list[str]:
    subtasks = (doc.get("group_subtasks") or {}).get(task)
    if not subtasks:
        return [task]
    return [leaf for sub in subtasks for leaf in _lm_eval_leaves(doc, sub)]


def read_lm_eval_results(output_path: str | Path, tasks: Sequence[str], *, log: str = "") -> dict[str, ToolScore]:
    """Each task's primary metric (the first of its ``metric_list``, with its filter) from the
    newest ``results_*.json``; ``n`` is lm-eval's effective sample count (summed over a group)."""
    newest = _newest(list(Path(output_path).rglob("results_*.json")))
    if newest is None:
        raise TrialFailed(f"lm-eval wrote no results_*.json under {output_path} (log: {log or 'none'})")
    doc = json.loads(newest.read_text(encoding="utf-8"))
    out: dict[str, ToolScore] = {}
    for task in tasks:
        metrics = (doc.get("results") or {}).get(task)
        if not metrics:
            raise TrialFailed(f"lm-eval reported no result for task {task!r} in {newest} (log: {log or 'none'})")
        declared = list((doc.get("higher_is_better") or {}).get(task) or ())
        keys = [k for k in metrics if "," in k and "_stderr," not in k
                and isinstance(metrics[k], (int, float)) and not isinstance(metrics[k], bool)]
        ranked = sorted(keys, key=lambda k: declared.index(k.split(",")[0]) if k.split(",")[0] in declared
                        else len(declared))
        if not ranked:
            raise TrialFailed(f"lm-eval task {task!r} has no metric in {newest}")
        counts = doc.get("n-samples") or {}
        n = sum(int((counts.get(leaf) or {}).get("effective", 0)) for leaf in _lm_eval_leaves(doc, task))
        out[task] = ToolScore(ranked[0], float(metrics[ranked[0]]), n)
    return out


_LM_EVAL_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}:\d{2}:\d{2}:\d{2}) \w+ +\[[^\]]*\] Running \w+ requests")


def lm_eval_first_request_ts(log_text: str) -> float | None:
    """When lm-eval started its first batch of requests (model and tasks loaded), from its log."""
    for line in log_text.splitlines():
        match = _LM_EVAL_TS.match(line)
        if match:
            return time.mktime(datetime.strptime(match.group(1), "%Y-%m-%d:%H:%M:%S").timetuple())
    return None


# --------------------------------------------------------- OpenCompass output

def latest_run(work_dir: str | Path) -> Path:
    root = Path(work_dir)
    runs = sorted(p for p in root.iterdir() if p.is_dir() and re.fullmatch(r"\d{8}_\d{6}", p.name)) \
        if root.is_dir() else []
    if not runs:
        raise TrialFailed(f"OpenCompass left no timestamped run folder in {work_dir}")
    return runs[-1]


def opencompass_predictions(run: Path, model_abbr: str, abbr: str) -> int | None:
    """Examples predicted for one dataset abbreviation (whole or split files); None if none."""
    folder = run / "predictions" / model_abbr
    files = [folder / f"{abbr}.json", *sorted(folder.glob(f"{abbr}_[0-9]*.json"))]
    found = [f for f in files if f.is_file() and re.fullmatch(rf"{re.escape(abbr)}(_\d+)?\.json", f.name)]
    if not found:
        return None
    return sum(len(json.loads(f.read_text(encoding="utf-8"))) for f in found)


def check_opencompass_inference(work_dir: str | Path, model_abbr: str, abbrs: Sequence[str]) -> dict[str, int]:
    """Predictions per abbreviation after ``--mode infer``; a missing one fails the trial."""
    run = latest_run(work_dir)
    counts = {}
    for abbr in abbrs:
        n = opencompass_predictions(run, model_abbr, abbr)
        if n is None:
            log = run / "logs" / "infer" / model_abbr / f"{abbr}.out"
            raise TrialFailed(f"OpenCompass exited 0 but wrote no predictions for {abbr!r} "
                              f"(see {log if log.exists() else run / 'logs' / 'infer'})")
        counts[abbr] = n
    return counts


def read_opencompass_summary(run: Path, model_abbr: str) -> dict[str, tuple[str, str]]:
    """{dataset abbr: (metric, value text)} from the newest ``summary/summary_*.csv``."""
    newest = _newest(list((run / "summary").glob("summary_*.csv")))
    if newest is None:
        raise TrialFailed(f"OpenCompass wrote no summary CSV in {run / 'summary'}")
    with newest.open(encoding="utf-8") as fh:
        return {row["dataset"]: (row.get("metric") or "-", row.get(model_abbr) or "-") for row in csv.DictReader(fh)}


def read_opencompass_results(work_dir: str | Path, model_abbr: str,
                             datasets: Mapping[str, Sequence[str]]) -> dict[str, ToolScore]:
    """Each registry dataset's score from ``--mode eval``: the metric OpenCompass's summary
    names, at full precision from ``results/<model>/<abbr>.json`` (percent, as written);
    a dataset of several abbreviations is their mean (the summary's naive average)."""
    run = latest_run(work_dir)
    summary = read_opencompass_summary(run, model_abbr)
    out: dict[str, ToolScore] = {}
    for name, abbrs in datasets.items():
        values, metrics, n = [], set(), 0
        for abbr in abbrs:
            metric, shown = summary.get(abbr, ("-", "-"))
            result = run / "results" / model_abbr / f"{abbr}.json"
            if metric == "-" or shown == "-" or not result.is_file():
                log = run / "logs" / "eval" / model_abbr / f"{abbr}.out"
                raise TrialFailed(f"OpenCompass has no result for {abbr!r} (see {log if log.exists() else run})")
            doc = json.loads(result.read_text(encoding="utf-8"))
            values.append(float(doc[metric]))
            metrics.add(metric)
            n += opencompass_predictions(run, model_abbr, abbr) or 0
        out[name] = ToolScore(metrics.pop() if len(metrics) == 1 else "mean", sum(values) / len(values), n)
    return out


_OC_ELAPSED = re.compile(r"time elapsed: *([0-9.]+)s")
_OC_TS = re.compile(r"^(\d{2}/\d{2} \d{2}:\d{2}:\d{2}) - OpenCompass - INFO - (Task \[|The Progress of This Task)")


def opencompass_infer_times(work_dir: str | Path, model_abbr: str) -> tuple[float, float]:
    """(model load s, inference s) that OpenCompass logged for its infer tasks: each task
    logs its ``time elapsed`` (load + inference); load is from its ``Task [...]`` line to its
    first ``Progress`` line (the model is built in between)."""
    run = latest_run(work_dir)
    load = total = 0.0
    for log in sorted((run / "logs" / "infer" / model_abbr).glob("*.out")):
        text = log.read_text(encoding="utf-8", errors="replace")
        elapsed = [float(m) for m in _OC_ELAPSED.findall(text)]
        total += sum(elapsed)
        stamps: dict[str, float] = {}
        for line in text.splitlines():
            match = _OC_TS.match(line)
            if match and match.group(2) not in stamps:
                stamps[match.group(2)] = datetime.strptime(match.group(1), "%m/%d %H:%M:%S").timestamp()
        if len(stamps) == 2:
            load += max(0.0, stamps["The Progress of This Task"] - stamps["Task ["])
    return load, max(0.0, total - load)


def share(seconds: float, counts: Mapping[str, int]) -> dict[str, float]:
    """Split one measured time among a trial's datasets by example count."""
    total = sum(counts.values())
    if not total:
        return {k: seconds / max(1, len(counts)) for k in counts}
    return {k: seconds * v / total for k, v in counts.items()}
