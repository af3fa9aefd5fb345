"""The shipped registry's 63 datasets against the installed lm-eval and OpenCompass.

Offline: each tool is asked for its own task list (lm-eval's TaskManager,
OpenCompass's config files, searched as its ``--datasets`` does) through the
interpreter of the executable seval would run. Every mapped name must resolve
to exactly one task; every dataset a tool has no task for must be one of the
few listed here (and is rejected at plan time with the tool's nearest names).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from slurm_acme.errors import InputError
from slurm_acme.evaluate.backends.catalogue import (
    Catalogue,
    check_names,
    lm_eval_catalogue,
    opencompass_abbrs,
    opencompass_catalogue,
)
from slurm_acme.evaluate.registry import load_registry

pytestmark = pytest.mark.integration

PYTHON = sys.executable
#: Datasets lm-eval 0.4.13 has no task for (Chinese CLUE sets, judges, ...): mapped as empty.
NOT_IN_LM_EVAL = {"GaokaoBench", "C3", "CMRC_dev", "DRCD_dev", "afqmc-dev", "cmnli", "ocnli", "bustm", "chid",
                  "cluewsc", "csl", "eprstmt", "ocnli_fc", "tnews", "lcsts", "AX_b", "AX_g", "race-middle",
                  "summedits", "TheoremQA", "openbookqa_fact", "flores_100", "sanitized_mbpp", "ds1000",
                  "alpaca_eval", "mtbench"}


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
    return lm_eval_catalogue(PYTHON, [str(user_tasks)])


def test_every_lm_eval_task_is_in_the_installed_task_manager(shipped, lm_eval_tasks):
    catalogue = lm_eval_tasks
    mapped = {d.name: d.lm_eval_task for d in shipped if d.lm_eval_task}
    assert {d.name for d in shipped if not d.lm_eval_task} == NOT_IN_LM_EVAL
    check_names(catalogue, mapped)
    assert len(mapped) == 63 - len(NOT_IN_LM_EVAL)
    with pytest.raises(InputError, match=r"siqa: lm-eval has no task 'siqa' \(nearest: .*siqa_ca"):
        check_names(catalogue, {"siqa": "siqa"})
    with pytest.raises(InputError, match="C3: no lm-eval task is mapped"):
        check_names(catalogue, {"C3": ""})


def test_user_task_folders_join_the_catalogues(user_tasks, lm_eval_tasks):
    assert "acme_mine" in lm_eval_tasks.names
    found = opencompass_catalogue(PYTHON, [str(user_tasks)])
    assert found.files["mine_gen"] == (str(Path(user_tasks, "datasets", "mine_gen.py")),)
