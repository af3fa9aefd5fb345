"""The installed tools' own task lists, and plan-time checks of names against them.

lm-evaluation-harness knows its tasks through ``lm_eval.tasks.TaskManager``
(``all_tasks``, with the user's ``include_path`` folders indexed too).
OpenCompass finds a ``--datasets NAME`` by searching ``NAME.py`` recursively
under ``<config_dir>/datasets``, ``<config_dir>/dataset_collections`` and its
package's ``configs/datasets`` and ``configs/dataset_collections``, and takes
the one match (several or none is an error). Both lists are read with the
tool's own interpreter, so a tool installed in another environment than
seval's is asked, not guessed.
"""

from __future__ import annotations

import difflib
import json
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_acme.errors import InputError

_LM_EVAL_LIST = """
import json, sys
from lm_eval.tasks import TaskManager
paths = json.loads(sys.argv[1])
tm = TaskManager(include_path=paths or None)
print(json.dumps(sorted(tm.all_tasks)))
"""

_OPENCOMPASS_ROOT = """
import json, os, opencompass
print(json.dumps(os.path.join(os.path.dirname(opencompass.__file__), "configs")))
"""

_OPENCOMPASS_ABBRS = """
import json, sys
from mmengine.config import Config
from opencompass.utils import dataset_abbr_from_cfg
out = {}
for name, path in json.loads(sys.argv[1]).items():
    cfg = Config.fromfile(path)
    out[name] = [dataset_abbr_from_cfg(d) for k in cfg.keys() if k.endswith("_datasets") for d in cfg[k]]
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Catalogue:
    """What one installed tool can run: task (lm-eval) or dataset-config (OpenCompass) names.

    ``files`` maps an OpenCompass config name to its file(s); lm-eval leaves it empty.
    """

    tool: str
    names: frozenset[str]
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: OpenCompass config name -> the dataset abbreviations it defines (its result files).
    abbrs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def nearest(self, name: str, n: int = 5) -> list[str]:
        return difflib.get_close_matches(name, sorted(self.names), n=n, cutoff=0.5)

    def reported_as(self, dataset: str, task: str) -> tuple[str, ...]:
        """The names the tool's results use for one registry dataset: the lm-eval task;
        for OpenCompass the config's abbreviation equal to the dataset's name if there is
        one (``race_ppl`` defines ``race-middle`` and ``race-high``), else all of them."""
        if self.tool != "opencompass":
            return (task,)
        abbrs = tuple(self.abbrs.get(task) or (task,))
        return (dataset,) if dataset in abbrs else abbrs


def _tool_python(tool_python: str, code: str, *args: str, what: str) -> str:
    try:
        proc = subprocess.run([tool_python, "-c", code, *args], capture_output=True, text=True,
                              timeout=600, check=False, env=offline_env())
    except OSError as exc:
        raise InputError(f"{what}: cannot run {tool_python}: {exc.strerror}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise InputError(f"{what}: {tool_python} failed: {last}")
    return proc.stdout.strip().splitlines()[-1]


def offline_env() -> dict[str, str]:
    """The caller's environment with the Hugging Face hub and datasets offline (no downloads)."""
    import os

    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "HF_EVALUATE_OFFLINE": "1"}


def lm_eval_include_paths(user_paths: Sequence[str] = ()) -> list[str]:
    """The folders lm-eval indexes for seval: the shipped task definitions, then the
    user's (a later folder's task overrides an earlier one of the same name)."""
    from slurm_acme.evaluate.registry import shipped_lm_eval_tasks

    return [str(shipped_lm_eval_tasks()), *user_paths]


def lm_eval_catalogue(tool_python: str, include_paths: Sequence[str] = ()) -> Catalogue:
    """lm-eval's TaskManager task list (with the user's include paths)."""
    out = _tool_python(tool_python, _LM_EVAL_LIST, json.dumps(list(include_paths)),
                       what="lm-eval task list")
    return Catalogue("lm-eval", frozenset(json.loads(out)), {})


def opencompass_config_files(config_root: Path, config_dirs: Iterable[str] = ()) -> dict[str, tuple[str, ...]]:
    """Config name -> files, searched the way OpenCompass's ``match_cfg_file`` does."""
    roots = [Path(d) / sub for d in config_dirs for sub in ("datasets", "dataset_collections")]
    roots += [config_root / "datasets", config_root / "dataset_collections"]
    files: dict[str, list[str]] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")) if root.is_dir() else ():
            if path.name != "__init__.py":
                files.setdefault(path.stem, []).append(str(path))
    return {name: tuple(paths) for name, paths in files.items()}


def opencompass_catalogue(tool_python: str, config_dirs: Sequence[str] = ()) -> Catalogue:
    root = Path(json.loads(_tool_python(tool_python, _OPENCOMPASS_ROOT, what="OpenCompass configs")))
    files = opencompass_config_files(root, config_dirs)
    return Catalogue("opencompass", frozenset(files), files)


def opencompass_abbrs(tool_python: str, catalogue: Catalogue, configs: Iterable[str]) -> dict[str, list[str]]:
    """Config name -> the dataset abbreviations it defines (the names of its result files)."""
    wanted = {name: catalogue.files[name][0] for name in sorted(set(configs))}
    if not wanted:
        return {}
    return dict(json.loads(_tool_python(tool_python, _OPENCOMPASS_ABBRS, json.dumps(wanted),
                                        what="OpenCompass dataset configs")))


def load_catalogue(tool, wanted: Sequence[str]) -> Catalogue:  # type: ignore[no-untyped-def]
    """The installed tool's catalogue, asked through its own interpreter (a ``ToolRun``)."""
    from slurm_acme.evaluate.backends.external import tool_python

    python = tool_python(tool.executable)
    if tool.backend == "lm-eval":
        return lm_eval_catalogue(python, lm_eval_include_paths(tool.task_paths))
    found = opencompass_catalogue(python, tool.task_paths)
    known = [w for w in wanted if len(found.files.get(w, ())) == 1]
    return Catalogue(found.tool, found.names, found.files,
                     {k: tuple(v) for k, v in opencompass_abbrs(python, found, known).items()})


def check_names(catalogue: Catalogue, wanted: Mapping[str, str],
                unsupported: Mapping[str, str] | None = None) -> None:
    """Every (registry name -> tool name) must be a name the tool resolves to exactly one task.

    Raises one InputError listing each unknown or ambiguous name with the tool's nearest
    names; a dataset the registry says the tool cannot run is listed with that reason.
    """
    problems = []
    for dataset, tool_name in wanted.items():
        reason = (unsupported or {}).get(dataset, "")
        if not tool_name and reason:
            problems.append(f"{dataset}: {reason}; use --backend opencompass")
        elif not tool_name:
            problems.append(f"{dataset}: no {catalogue.tool} task is mapped (registry column "
                            f"{column_for(catalogue.tool)!r} is empty)")
        elif tool_name not in catalogue.names:
            near = ", ".join(catalogue.nearest(tool_name)) or "none close"
            problems.append(f"{dataset}: {catalogue.tool} has no task {tool_name!r} (nearest: {near})")
        elif len(catalogue.files.get(tool_name, ("",))) > 1:
            problems.append(f"{dataset}: {catalogue.tool} config {tool_name!r} is ambiguous "
                            f"({', '.join(catalogue.files[tool_name])})")
    if problems:
        raise InputError("--datasets: " + "; ".join(problems))


def column_for(tool: str) -> str:
    """The registry column naming each dataset's task in ``tool``."""
    return {"lm-eval": "lm_eval_task", "opencompass": "opencompass_config"}[tool]
