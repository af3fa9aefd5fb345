"""The run spec: what every job of one evaluation reads from the shared run dir.

``<run_dir>/spec.json`` is written once at submission (before any job can
start) and never changed; jobs find their trial by (node, array index).
Outputs go under the same dir: ``pred/<trial>/<shard>.jsonl``,
``timing/<trial>.json``, ``score/<trial>.json``, ``logs/``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from slurm_acme.evaluate.backends.external import ToolRun
from slurm_acme.evaluate.planner import Plan
from slurm_acme.evaluate.registry import Dataset
from slurm_acme.files import PLAIN_PARENT_MODE, make_private_dirs

SPEC_FILE = "spec.json"


@dataclass(frozen=True)
class ShardSpec:
    key: str
    dataset: str
    start: int
    stop: int


@dataclass(frozen=True)
class TrialSpec:
    trial_id: str
    node: int
    index: int  # position in the node's GPU array
    slot: int
    shards: tuple[ShardSpec, ...]


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    mode: str  # "gen" or "ppl"
    kind: str  # scoring: "code", "ppl" or "gen"
    metric: str
    path: str
    tool_task: str = ""  # the external tool's task / dataset config
    tool_parts: tuple[str, ...] = ()  # what the tool reports it as (OpenCompass dataset abbrs)


@dataclass(frozen=True)
class RunSpec:
    eval_id: str
    checkpoint: str
    local_dir: str  # node-local copy lives at <local_dir>/<eval_id>
    backend: str
    model_size_b: float
    db_url: str
    nodes: tuple[str, ...]
    datasets: dict[str, DatasetSpec]
    trials: tuple[TrialSpec, ...]
    tool: ToolRun | None = None  # external backends: how to call the tool

    def trial(self, node: int, index: int) -> TrialSpec:
        for trial in self.trials:
            if trial.node == node and trial.index == index:
                return trial
        raise KeyError(f"no trial {index} on node {node}")

    def node_trials(self, node: int) -> list[TrialSpec]:
        return sorted((t for t in self.trials if t.node == node), key=lambda t: t.index)

    def node_dir(self, node: int) -> Path:
        """This node's folder under the local dir; the node name keeps emulated nodes sharing one host apart."""
        name = self.nodes[node] if node < len(self.nodes) else f"node{node}"
        return Path(self.local_dir) / self.eval_id / name

    def local_copy(self, node: int) -> Path:
        """Node-local copy. It keeps the checkpoint's folder name, which tools derive model
        names from (OpenCompass: ``<basename>_hf``), so the copy and the original agree."""
        return self.node_dir(node) / Path(self.checkpoint).name


def dataset_spec(ds: Dataset, backend: str = "builtin", parts: tuple[str, ...] = ()) -> DatasetSpec:
    kind = "code" if ds.is_code else ("gen" if ds.is_gen else "ppl")
    task = ds.tool_task(backend) if backend != "builtin" else ""
    return DatasetSpec(ds.name, "gen" if ds.is_gen else "ppl", kind, ds.metric, ds.path, task, parts)


def build_spec(*, eval_id: str, checkpoint: str, local_dir: str, backend: str, model_size_b: float,
               db_url: str, nodes: tuple[str, ...], plan: Plan, datasets: list[Dataset],
               tool: ToolRun | None = None, parts: dict[str, tuple[str, ...]] | None = None) -> RunSpec:
    trials = []
    for node in range(plan.resources.nodes):
        for index, trial in enumerate(plan.node_trials(node)):
            trials.append(TrialSpec(trial.trial_id, node, index, trial.slot, tuple(
                ShardSpec(s.key, s.dataset, s.start, s.stop) for s in trial.shards)))
    wanted = set(plan.datasets)
    parts = parts or {}
    return RunSpec(eval_id, checkpoint, local_dir, backend, model_size_b, db_url, nodes,
                   {d.name: dataset_spec(d, backend, parts.get(d.name, ())) for d in datasets if d.name in wanted},
                   tuple(trials), tool)


def write_spec(spec: RunSpec, run_dir: Path) -> Path:
    make_private_dirs(run_dir, parents_mode=PLAIN_PARENT_MODE)  # evaluate.work_dir may be shared
    for sub in ("pred", "timing", "score", "logs"):
        (run_dir / sub).mkdir(exist_ok=True)
    path = run_dir / SPEC_FILE
    path.write_text(json.dumps(asdict(spec), indent=1), encoding="utf-8")
    return path


def read_spec(run_dir: Path) -> RunSpec:
    raw: dict[str, Any] = json.loads((run_dir / SPEC_FILE).read_text(encoding="utf-8"))
    return RunSpec(
        eval_id=raw["eval_id"], checkpoint=raw["checkpoint"], local_dir=raw["local_dir"],
        backend=raw["backend"], model_size_b=raw["model_size_b"], db_url=raw["db_url"],
        nodes=tuple(raw["nodes"]),
        datasets={k: DatasetSpec(**{**v, "tool_parts": tuple(v.get("tool_parts") or ())})
                  for k, v in raw["datasets"].items()},
        trials=tuple(TrialSpec(t["trial_id"], t["node"], t["index"], t["slot"],
                               tuple(ShardSpec(**s) for s in t["shards"])) for t in raw["trials"]),
        tool=_tool(raw.get("tool")),
    )


def _tool(raw: dict[str, Any] | None) -> ToolRun | None:
    if not raw:
        return None
    return ToolRun(**{**raw, "task_paths": tuple(raw.get("task_paths") or ()),
                      "model_args": tuple(raw.get("model_args") or ())})
