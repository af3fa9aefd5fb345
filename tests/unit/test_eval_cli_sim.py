"""``seval`` CLI contract (dry run, bad input, subcommands) and the simulator's targets."""

from __future__ import annotations

import json
import string

import pytest

from slurm_acme.cli.main import run_cli
from slurm_acme.cli.seval import seval


@pytest.fixture
def ckpt(tmp_path):
    from slurm_acme.models.tiny_gpt import CharTokenizer, TinyGPT, TinyGPTConfig, save_pretrained

    tok = CharTokenizer(sorted(set(string.printable)))
    return save_pretrained(TinyGPT(TinyGPTConfig(vocab_size=tok.vocab_size)), tok, tmp_path / "ckpt")


def test_dry_run_prints_plan_bound_gap_baseline_and_sbatch_calls(ckpt, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # a dry run must not call any Slurm command
    code = run_cli(seval, "seval", ["--db", f"sqlite:///{tmp_path}/a.db", str(ckpt), "--datasets", "tiny",
                                    "--nodes", "2", "--gpus-per-node", "2", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    for words in ("predicted makespan:", "lower bound:", "gap:", "baseline makespan:", "<node0>/gpu0:",
                  "--dependency=aftercorr:<gpu-0>", "sbatch --parsable"):
        assert words in out


def test_dry_run_json_has_the_plan_and_jobs(ckpt, tmp_path, capsys):
    code = run_cli(seval, "seval", ["--db", f"sqlite:///{tmp_path}/a.db", str(ckpt), "--datasets",
                                    "tiny_code,tiny_choice", "--dry-run", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["plan"]["lower_bound_s"] <= doc["plan"]["predicted_makespan_s"]
    assert {j["key"] for j in doc["jobs"]} >= {"preload-0", "gpu-0", "score-0", "aggregate"}
    assert set(doc["priors"].values()) == {"heuristic"}


@pytest.mark.parametrize("argv, message", [
    (["{ckpt}", "--datasets", "nope", "--dry-run"], "unknown dataset or group 'nope'"),
    (["/no/such/ckpt", "--datasets", "tiny", "--dry-run"], "is not a directory"),
    (["{ckpt}", "--datasets", "mmlu", "--dry-run"], "needs example files"),
    (["results", "/no/such"], "no evaluation"),
    (["simulate", "--nodes", "x"], "expected comma-separated integers"),
])
def test_bad_input_is_one_line_and_exit_2(ckpt, tmp_path, capsys, argv, message):
    argv = [a.replace("{ckpt}", str(ckpt)) for a in argv]
    from slurm_acme.store import open_store

    open_store(f"sqlite:///{tmp_path}/a.db").dispose()  # read commands never create a store
    code = run_cli(seval, "seval", ["--db", f"sqlite:///{tmp_path}/a.db", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_simulate_meets_the_papers_targets(capsys):
    assert run_cli(seval, "seval", ["simulate", "--nodes", "1,4"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cal = doc["calibration"]
    assert cal["baseline_load_preprocess_share"] == pytest.approx(0.295, abs=0.005)
    assert cal["baseline_metric_share"] == pytest.approx(0.19, abs=0.005)
    one, four = doc["runs"]
    assert one["speedup"] >= 1.3 and four["speedup"] >= 1.8
    assert one["gap_to_lower_bound"] <= 0.10 and four["gap_to_lower_bound"] <= 0.10
    assert one["coordinator"]["loading_share"] < one["baseline"]["loading_share"]
    assert one["coordinator"]["gpu_idle_share"] < one["baseline"]["gpu_idle_share"]


def test_nic_sharing_slows_concurrent_baseline_loads():
    from slurm_acme.evaluate.priors import DEFAULT_HEURISTIC
    from slurm_acme.evaluate.registry import load_registry
    from slurm_acme.evaluate.simulate import SimConfig, simulate_baseline, work_for

    datasets = load_registry().select("ceval,csl,bustm,eprstmt")
    work = work_for(datasets, 7.0, DEFAULT_HEURISTIC)
    alone = simulate_baseline(datasets[:1], work, SimConfig(gpus_per_node=8))
    four = simulate_baseline(datasets, work, SimConfig(gpus_per_node=8))
    per_load_alone = alone.load_s - SimConfig().engine_start_s
    assert per_load_alone == pytest.approx(14 * 8 / 25, rel=1e-6)
    assert four.load_s - 4 * SimConfig().engine_start_s == pytest.approx(4 * 4 * per_load_alone, rel=1e-6)
