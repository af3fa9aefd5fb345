"""docs/training.md documents every name of the training contract (declared in code once)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_acme import contracts, exitcodes
from slurm_acme.ft.sbatch_options import ALLOWED
from slurm_acme.ft.spec import TrainSpec

DOC = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()


@pytest.mark.parametrize("name", contracts.TRAINING_ENV)
def test_every_training_variable_is_documented(name: str) -> None:
    assert f"`{name}`" in DOC or f"`{name}`," in DOC or name in DOC


@pytest.mark.parametrize("event", [e.value for e in contracts.MetricEvent])
def test_every_metric_event_is_documented(event: str) -> None:
    assert f"`{event}`" in DOC


@pytest.mark.parametrize("code", sorted({v for k, v in vars(exitcodes).items() if k.isupper()} - {1, 2}))
def test_every_training_exit_code_is_documented(code: int) -> None:
    assert re.search(rf"^\| {code} \|", DOC, re.M)


def test_the_sbatch_allow_list_is_the_documented_one() -> None:
    listed = DOC.split("Allowed: ", 1)[1].split(". `true`", 1)[0]
    assert [w.strip() for w in " ".join(listed.split()).split(",")] == list(ALLOWED)


def test_the_readme_links_the_training_contract() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "docs/training.md" in readme


@pytest.mark.parametrize("key", ["launch", "torchrun", "sbatch", "progress"])
def test_new_train_yaml_keys_are_documented(key: str) -> None:
    assert key in TrainSpec.model_fields and f"`{key}" in DOC
