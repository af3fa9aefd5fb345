"""The dataset registry: the 63 shipped datasets, named groups, user datasets.

A registry file is a CSV with the columns of ``etc/acme/datasets.csv``:
``name,num_examples,mode,metric,cpu_heavy,size_source,oc_cost_units`` and,
optionally:

- ``path``: a JSONL file of examples, relative to the CSV (the builtin backend needs it);
- ``lm_eval_task``: the lm-evaluation-harness task (or group) name, as ``--tasks`` takes it;
- ``opencompass_config``: the OpenCompass dataset config, as ``--datasets`` takes it
  (a ``NAME.py`` under its ``configs/datasets`` or a ``--config-dir``);
- ``lm_eval_unsupported``: why a dataset cannot be an lm-eval task (an LLM judge, its
  own execution harness); the plan-time check prints it in place of a task name;
- ``groups``: space-separated extra group names.

Datasets lm-eval ships no task for are defined in ``slurm_acme/data/eval/lm_eval_tasks/``
(lm-eval YAML, passed to it as an ``--include_path``). An empty tool column means
that tool has no such task; planning for it then fails with the reason or the
tool's nearest names. User datasets are more such files layered
on top (later files win by name), listed in ``evaluate.datasets_files``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from slurm_acme.errors import InputError

REQUIRED_COLUMNS = ("name", "num_examples", "mode", "metric", "cpu_heavy", "oc_cost_units")

#: Curated groups over the shipped datasets (names as in the CSV).
CURATED_GROUPS: dict[str, tuple[str, ...]] = {
    "code": ("openai_humaneval", "mbpp", "sanitized_mbpp", "humaneval_plus", "mbpp_plus", "ds1000"),
    "knowledge": ("mmlu", "ceval", "cmmlu", "agieval", "GaokaoBench", "nq", "triviaqa",
                  "commonsense_qa", "openbookqa", "openbookqa_fact", "ARC-e", "ARC-c", "BoolQ",
                  "truthfulqa"),
    "reasoning": ("bbh", "gsm8k", "math", "TheoremQA", "strategyqa", "hellaswag", "piqa", "siqa",
                  "winogrande", "story_cloze", "COPA", "ReCoRD", "WSC", "WiC", "CB", "RTE",
                  "AX_b", "AX_g", "MultiRC", "race-middle", "race-high"),
    "chinese": ("ceval", "cmmlu", "C3", "CMRC_dev", "DRCD_dev", "afqmc-dev", "cmnli", "ocnli",
                "bustm", "chid", "cluewsc", "csl", "eprstmt", "ocnli_fc", "tnews", "lcsts",
                "GaokaoBench"),
    "language": ("lambada", "Xsum", "flores_100", "summedits", "tydiqa", "crowspairs", "lcsts"),
    "judge": ("truthfulqa", "alpaca_eval", "mtbench"),
}


@dataclass(frozen=True)
class Dataset:
    """One evaluation dataset as the planner and the backends see it."""

    name: str
    num_examples: int
    mode: str  # "gen", "ppl" or "mixed(...)" as written in the registry
    metric: str
    cpu_heavy: str  # "no", "yes", "partial", "yes-judge"
    oc_cost_units: int
    path: str = ""  # JSONL of examples (builtin backend); absolute once loaded
    groups: tuple[str, ...] = ()
    lm_eval_task: str = ""
    opencompass_config: str = ""
    lm_eval_unsupported: str = ""  # why no lm-eval task can exist ('' when one is mapped)

    def tool_task(self, backend: str) -> str:
        """This dataset's name in an external tool ('' when the registry maps none)."""
        return {"lm-eval": self.lm_eval_task, "opencompass": self.opencompass_config}.get(backend, self.name)

    @property
    def is_gen(self) -> bool:
        return self.mode.startswith("gen") or self.mode.startswith("mixed")

    @property
    def is_code(self) -> bool:
        """Scored by executing generated programs (HumanEval/MBPP style)."""
        return "code execution" in self.metric or "evalplus" in self.metric

    @property
    def is_judge(self) -> bool:
        return self.cpu_heavy == "yes-judge"


@dataclass(frozen=True)
class Registry:
    """Datasets by name plus groups; the selection language is ``--datasets``."""

    datasets: dict[str, Dataset]
    groups: dict[str, tuple[str, ...]]

    def select(self, spec: str) -> list[Dataset]:
        """Resolve ``all``, group names and dataset names (comma separated), in order, no repeats."""
        chosen: dict[str, Dataset] = {}
        for word in (w.strip() for w in spec.split(",")):
            if not word:
                continue
            if word in self.groups:
                names: Iterable[str] = self.groups[word]
            elif word in self.datasets:
                names = (word,)
            else:
                raise InputError(
                    f"--datasets: unknown dataset or group {word!r} "
                    f"(groups: {', '.join(sorted(self.groups))})")
            for name in names:
                chosen.setdefault(name, self.datasets[name])
        if not chosen:
            raise InputError(f"--datasets: {spec!r} selects no dataset")
        return list(chosen.values())


def shipped_registry_path() -> Path:
    """The 63-dataset CSV shipped as package data (same content as etc/acme/datasets.csv)."""
    return Path(str(resources.files("slurm_acme") / "data" / "eval" / "datasets.csv"))


def shipped_lm_eval_tasks() -> Path:
    """The lm-eval task definitions (YAML) for shipped datasets lm-eval itself lacks."""
    return Path(str(resources.files("slurm_acme") / "data" / "eval" / "lm_eval_tasks"))


def tiny_registry_path() -> Path:
    """Small datasets in the registry's format that the builtin backend can really run."""
    return Path(str(resources.files("slurm_acme") / "data" / "eval" / "tiny" / "datasets.csv"))


def _int(row: dict[str, str], column: str, source: str, line: int) -> int:
    value = (row.get(column) or "").strip()
    try:
        number = int(value)
    except ValueError:
        raise InputError(f"{source}:{line}: column {column!r} must be an integer (got {value!r})") from None
    if number < 0:
        raise InputError(f"{source}:{line}: column {column!r} must be >= 0 (got {number})")
    return number


def read_registry_file(path: str | Path) -> list[Dataset]:
    """Parse one registry CSV; errors name the file, line, column and value."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read dataset registry: {exc.strerror}") from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"{path}: dataset registry lacks columns {missing}")
    out = []
    for line, row in enumerate(reader, start=2):
        name = (row.get("name") or "").strip()
        if not name or "," in name or "/" in name:
            raise InputError(f"{path}:{line}: bad dataset name {name!r}")
        data_path = (row.get("path") or "").strip()
        if data_path and not Path(data_path).is_absolute():
            data_path = str((path.parent / data_path).resolve())
        out.append(Dataset(
            name=name,
            num_examples=_int(row, "num_examples", str(path), line),
            mode=(row.get("mode") or "").strip(),
            metric=(row.get("metric") or "").strip(),
            cpu_heavy=(row.get("cpu_heavy") or "no").strip(),
            oc_cost_units=_int(row, "oc_cost_units", str(path), line),
            path=data_path,
            groups=tuple((row.get("groups") or "").split()),
            lm_eval_task=(row.get("lm_eval_task") or "").strip(),
            opencompass_config=(row.get("opencompass_config") or "").strip(),
            lm_eval_unsupported=(row.get("lm_eval_unsupported") or "").strip(),
        ))
    return out


def build_registry(datasets: Sequence[Dataset], *, all_names: Iterable[str] | None = None) -> Registry:
    """Index datasets and derive groups: ``all`` (the shipped 63), curated ones, ``gen``,
    ``ppl``, ``cpu-heavy`` and any group named in a file's ``groups`` column."""
    by_name: dict[str, Dataset] = {}
    for ds in datasets:
        by_name[ds.name] = ds
    groups: dict[str, list[str]] = {"all": list(all_names) if all_names is not None else list(by_name)}
    for group, names in CURATED_GROUPS.items():
        present = [n for n in names if n in by_name]
        if present:
            groups[group] = present
    groups["gen"] = [n for n in groups["all"] if by_name[n].is_gen]
    groups["ppl"] = [n for n in groups["all"] if not by_name[n].is_gen]
    groups["cpu-heavy"] = [n for n in groups["all"] if by_name[n].cpu_heavy != "no"]
    for ds in by_name.values():
        for group in ds.groups:
            groups.setdefault(group, []).append(ds.name)
    return Registry(datasets=by_name, groups={k: tuple(v) for k, v in groups.items()})


def load_registry(extra_files: Sequence[str | Path] = (), *, include_tiny: bool = True) -> Registry:
    """The shipped registry, the tiny shipped datasets and the user's files on top."""
    shipped = read_registry_file(shipped_registry_path())
    everything = list(shipped)
    if include_tiny:
        everything += read_registry_file(tiny_registry_path())
    for extra in extra_files:
        everything += read_registry_file(extra)
    return build_registry(everything, all_names=[d.name for d in shipped])
