"""The shipped registry's 63 datasets against the installed lm-eval and OpenCompass.

Offline: each tool is asked for its own task list (lm-eval's TaskManager,
OpenCompass's config files, searched as its ``--datasets`` does) through the
interpreter of the executable seval would run. Every mapped name must resolve
to exactly one task; every dataset a tool has no task for must be one of the
few listed here (and is rejected at plan time with the tool's nearest names).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_acme.errors import InputError
from slurm_acme.evaluate.backends.catalogue import (
    Catalogue,
    check_names,
    lm_eval_catalogue,
    lm_eval_include_paths,
    offline_env,
    opencompass_abbrs,
    opencompass_catalogue,
)
from slurm_acme.evaluate.backends.harness import build_task_union
from slurm_acme.evaluate.registry import load_registry, shipped_lm_eval_tasks

pytestmark = pytest.mark.integration

PYTHON = sys.executable
#: Datasets no lm-eval task can score as OpenCompass does: the registry says why, in one line.
NOT_IN_LM_EVAL = {"GaokaoBench", "flores_100", "ds1000", "alpaca_eval", "mtbench"}

_SHIPPED_CHECK = """
import json, logging, sys
from pathlib import Path
from lm_eval.tasks import TaskManager
from lm_eval.tasks._yaml_loader import load_yaml
from lm_eval.config.task import TaskConfig
folder = sys.argv[1]
warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("lm_eval").addHandler(Keep(level=logging.WARNING))
tm = TaskManager(include_path=folder)
loaded = {}
for path in sorted(Path(folder).glob("*.yaml")):
    cfg = load_yaml(path, resolve_func=True)
    if "task" in cfg:
        config = TaskConfig(**cfg)
        loaded[config.task] = {"output_type": config.output_type, "dataset_path": config.dataset_path,
                               "metrics": [m["metric"] if isinstance(m["metric"], str) else m["metric"].__name__
                                           for m in config.metric_list],
                               "indexed_from": str(tm.task_index[config.task].yaml_path)}
print(json.dumps({"loaded": loaded, "overrides": [w for w in warnings if "overrides" in w]}))
"""


@pytest.fixture(scope="module")
def shipped():  # type: ignore[no-untyped-def]
    datasets = load_registry(include_tiny=False).select("all")
    assert len(datasets) == 63
    return datasets


def test_every_opencompass_config_resolves_to_one_file_of_the_installed_opencompass(shipped):
    catalogue = opencompass_catalogue(PYTHON)
    wanted = {d.name: d.opencompass_config for d in shipped}
    assert all(wanted.values()), "every shipped dataset names an OpenCompass config"
    check_names(catalogue, wanted)
    abbrs = opencompass_abbrs(PYTHON, catalogue, set(wanted.values()))
    indexed = Catalogue(catalogue.tool, catalogue.names, catalogue.files, {k: tuple(v) for k, v in abbrs.items()})
    for d in shipped:
        parts = indexed.reported_as(d.name, d.opencompass_config)
        assert parts and all(parts), d.name
    # configs that define several datasets are told apart by abbreviation
    assert set(abbrs["race_ppl"]) >= {"race-middle", "race-high"}
    assert set(abbrs["obqa_ppl"]) >= {"openbookqa", "openbookqa_fact"}


@pytest.fixture(scope="module")
def user_tasks(tmp_path_factory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("user-tasks")
    (folder / "mine.yaml").write_text("task: acme_mine\ndataset_path: json\noutput_type: generate_until\n"
                                      'doc_to_text: "{{q}}"\ndoc_to_target: "{{a}}"\n')
    (folder / "datasets").mkdir()
    (folder / "datasets" / "mine_gen.py").write_text("mine_datasets = []\n")
    return folder


@pytest.fixture(scope="module")
def lm_eval_tasks(user_tasks):  # type: ignore[no-untyped-def]
    """The installed lm-eval's TaskManager list (indexing takes a while: once per module)."""
    return lm_eval_catalogue(PYTHON, lm_eval_include_paths([str(user_tasks)]))


def test_every_lm_eval_task_is_in_the_installed_task_manager(shipped, lm_eval_tasks):
    catalogue = lm_eval_tasks
    mapped = {d.name: d.lm_eval_task for d in shipped if d.lm_eval_task}
    assert {d.name for d in shipped if not d.lm_eval_task} == NOT_IN_LM_EVAL
    assert all(d.lm_eval_unsupported for d in shipped if d.name in NOT_IN_LM_EVAL)
    check_names(catalogue, mapped)
    assert len(mapped) == 58
    with pytest.raises(InputError, match=r"siqa: lm-eval has no task 'siqa' \(nearest: .*siqa_ca"):
        check_names(catalogue, {"siqa": "siqa"})
    with pytest.raises(InputError, match="myqa: no lm-eval task is mapped"):
        check_names(catalogue, {"myqa": ""})
    reasons = {d.name: d.lm_eval_unsupported for d in shipped}
    with pytest.raises(InputError, match=r"^--datasets: alpaca_eval: scored by an LLM judge .*; use --backend opencompass$"):
        check_names(catalogue, {"alpaca_eval": ""}, reasons)


@pytest.fixture(scope="module")
def shipped_yamls():  # type: ignore[no-untyped-def]
    """The shipped folder as the installed lm-eval indexes and parses it (offline, no dataset built)."""
    proc = subprocess.run([PYTHON, "-c", _SHIPPED_CHECK, str(shipped_lm_eval_tasks())], capture_output=True,
                          text=True, timeout=900, check=True, env=offline_env())
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_each_shipped_yaml_loads_its_config_and_overrides_no_lm_eval_task(shipped, shipped_yamls):
    folder = shipped_lm_eval_tasks()
    loaded = shipped_yamls["loaded"]
    ours = {d.name: d.lm_eval_task for d in shipped if d.lm_eval_task in loaded}
    assert len(ours) == 21 and set(ours.values()) == set(loaded)
    assert shipped_yamls["overrides"] == [], "a shipped task must not shadow one of lm-eval's own"
    for task, info in loaded.items():
        assert Path(info["indexed_from"]).parent == folder, task
        assert info["dataset_path"] and info["metrics"], task
        text = Path(info["indexed_from"]).read_text(encoding="utf-8")
        if "include: _fewclue.yaml" in text:
            text += (folder / "_fewclue.yaml").read_text(encoding="utf-8")
        assert "# Source:" in text and "OpenCompass:" in text, f"{task} credits its data and names its OC config"
    by_mode = {d.name: d.mode for d in shipped}
    for dataset, task in ours.items():  # OpenCompass ppl -> multiple_choice, gen -> generate_until
        want = "multiple_choice" if by_mode[dataset].startswith("ppl") else "generate_until"
        assert loaded[task]["output_type"] == want, dataset
    assert loaded["clue_cmrc2018"]["metrics"] == ["exact_match"] and loaded["lcsts"]["metrics"][0] == "rouge1"
    assert loaded["mbpp_sanitized"]["metrics"] == ["pass_at_1"]


def test_the_union_of_shipped_and_user_folders_is_one_include_path_where_the_user_wins(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "c3.yaml").write_text("task: clue_c3\ndataset_path: json\noutput_type: generate_until\n"
                                              'doc_to_text: "{{q}}"\ndoc_to_target: "{{a}}"\n')
    union = tmp_path / "union"
    build_task_union(lm_eval_include_paths([str(tmp_path / "mine")]), union)
    code = ("import json, sys\nfrom lm_eval.tasks import TaskManager\n"
            "tm = TaskManager(include_path=sys.argv[1], include_defaults=False)\n"
            "print(json.dumps({k: str(e.yaml_path) for k, e in tm.task_index.items()}))")
    proc = subprocess.run([PYTHON, "-c", code, str(union)], capture_output=True, text=True, timeout=600,
                          check=True, env=offline_env())
    index = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"fewclue_tnews", "theoremqa", "clue_c3"} <= set(index)
    assert Path(index["clue_c3"]).resolve() == (tmp_path / "mine" / "c3.yaml").resolve()


def test_user_task_folders_join_the_catalogues(user_tasks, lm_eval_tasks):
    assert "acme_mine" in lm_eval_tasks.names
    found = opencompass_catalogue(PYTHON, [str(user_tasks)])
    assert found.files["mine_gen"] == (str(Path(user_tasks, "datasets", "mine_gen.py")),)
