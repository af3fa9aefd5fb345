"""Dataset registry, groups, user datasets, and priors (heuristic and EWMA)."""

from __future__ import annotations

import pytest

from slurm_acme.errors import InputError
from slurm_acme.evaluate.priors import Prior, ewma, heuristic_prior, resolve_priors, size_bucket
from slurm_acme.evaluate.registry import load_registry, read_registry_file, shipped_registry_path


def test_the_shipped_registry_has_the_63_datasets_and_matches_etc():
    from pathlib import Path

    reg = load_registry()
    assert len(reg.groups["all"]) == 63
    etc = Path(__file__).resolve().parents[2] / "etc" / "acme" / "datasets.csv"
    assert etc.read_text() == shipped_registry_path().read_text()


def test_groups_select_in_order_without_repeats():
    reg = load_registry()
    code = [d.name for d in reg.select("code")]
    assert "openai_humaneval" in code and "mbpp" in code
    both = [d.name for d in reg.select("code,mbpp,knowledge")]
    assert len(both) == len(set(both))
    assert all(d.cpu_heavy != "no" for d in reg.select("cpu-heavy"))
    assert {d.name for d in reg.select("tiny")} == {"tiny_arith", "tiny_copy", "tiny_choice", "tiny_code"}


def test_unknown_names_are_a_one_line_input_error():
    with pytest.raises(InputError, match="unknown dataset or group 'nope'"):
        load_registry().select("code,nope")


def test_user_datasets_are_layered_on_top(tmp_path):
    (tmp_path / "mine.jsonl").write_text('{"prompt": "a", "answer": "b"}\n')
    user = tmp_path / "mine.csv"
    user.write_text("name,num_examples,mode,metric,cpu_heavy,size_source,oc_cost_units,path,groups\n"
                    "my_set,1,gen,EM,no,USER,10,mine.jsonl,team\n")
    reg = load_registry([user])
    [ds] = reg.select("team")
    assert ds.name == "my_set" and ds.path == str(tmp_path / "mine.jsonl")
    assert "my_set" not in reg.groups["all"]


def test_a_bad_registry_row_names_file_line_and_column(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,num_examples,mode,metric,cpu_heavy,oc_cost_units\nx,many,gen,EM,no,1\n")
    with pytest.raises(InputError, match=r"bad.csv:2: column 'num_examples' must be an integer"):
        read_registry_file(bad)


def test_heuristic_prior_scales_with_model_size_and_cost_units():
    reg = load_registry()
    bbh, ceval = reg.datasets["bbh"], reg.datasets["ceval"]
    small, big = heuristic_prior(bbh, 7.0), heuristic_prior(bbh, 70.0)
    assert big.gpu_s > 9 * (small.gpu_s - 30)
    assert heuristic_prior(bbh, 7.0).gpu_s > heuristic_prior(ceval, 7.0).gpu_s
    code = heuristic_prior(reg.datasets["openai_humaneval"], 7.0)
    assert code.cpu_s > heuristic_prior(reg.datasets["ceval"], 7.0).cpu_s
    assert small.source == "heuristic"


def test_ewma_first_sample_replaces_then_averages_and_counts():
    p = ewma(Prior(100.0, 10.0, 0), 40.0, 4.0)
    assert p == Prior(40.0, 4.0, 1)
    p2 = ewma(p, 20.0, 2.0)
    assert p2.samples == 2 and p2.gpu_s == pytest.approx(30.0) and p2.cpu_s == pytest.approx(3.0)
    p3 = ewma(Prior(30.0, 3.0, 9), 130.0, 3.0)
    assert p3.gpu_s == pytest.approx(60.0)  # weight floor alpha=0.3


def test_measured_priors_win_over_the_heuristic():
    datasets = load_registry().select("ceval,bbh")
    out = resolve_priors(datasets, 7.0, {"bbh": Prior(5.0, 1.0, 3)})
    assert out["bbh"] == Prior(5.0, 1.0, 3) and out["ceval"].source == "heuristic"
    assert size_bucket(6.74) == size_bucket(6.7) == 6.7
