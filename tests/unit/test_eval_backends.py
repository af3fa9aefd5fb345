"""OpenCompass / lm-eval command templates and output readers; builtin scoring."""

from __future__ import annotations

import json

import pytest

from slurm_acme.errors import InputError
from slurm_acme.evaluate.backends.external import (
    lm_eval_argv,
    opencompass_argv,
    opencompass_config,
    read_lm_eval_results,
    read_opencompass_results,
)
from slurm_acme.evaluate.scoring import exact_match, score_records


def test_opencompass_infer_then_eval_command_lines():
    infer = opencompass_argv("/dev/shm/m", ["mmlu_ppl", "gsm8k_gen"], "/w/t000", mode="infer")
    assert infer[:4] == ["opencompass", "--datasets", "mmlu_ppl", "gsm8k_gen"]
    assert infer[infer.index("--hf-path") + 1] == "/dev/shm/m"
    assert infer[infer.index("--mode") + 1] == "infer" and "--reuse" not in infer
    evaluate = opencompass_argv("/dev/shm/m", ["mmlu_ppl"], "/w/t000", mode="eval")
    assert evaluate[evaluate.index("--mode") + 1] == "eval"
    assert evaluate[evaluate.index("--reuse") + 1] == "latest"
    assert opencompass_config("mmlu", "ppl") == "mmlu_ppl" and opencompass_config("bbh", "gen") == "bbh_gen"
    with pytest.raises(InputError):
        opencompass_argv("/m", ["x"], "/w", mode="all")


def test_lm_eval_command_line():
    argv = lm_eval_argv("/dev/shm/m", ["hellaswag", "arc_easy"], "/w/out")
    assert argv[:3] == ["lm_eval", "--model", "hf"]
    assert argv[argv.index("--model_args") + 1] == "pretrained=/dev/shm/m"
    assert argv[argv.index("--tasks") + 1] == "hellaswag,arc_easy"
    assert argv[argv.index("--output_path") + 1] == "/w/out" and "--log_samples" in argv


def test_reads_the_newest_opencompass_results(tmp_path):
    old = tmp_path / "20240101_000000" / "results" / "hf_model"
    new = tmp_path / "20240102_000000" / "results" / "hf_model"
    for folder, value in ((old, 10.0), (new, 45.5)):
        folder.mkdir(parents=True)
        (folder / "mmlu.json").write_text(json.dumps({"accuracy": value}))
    (new / "openai_humaneval.json").write_text(json.dumps({"humaneval_pass@1": 12.2, "details": {}}))
    out = read_opencompass_results(tmp_path)
    assert out["mmlu"] == ("accuracy", pytest.approx(0.455))
    assert out["openai_humaneval"] == ("humaneval_pass@1", pytest.approx(0.122))


def test_reads_lm_eval_results_json(tmp_path):
    model_dir = tmp_path / "__dev__shm__m"
    model_dir.mkdir()
    (model_dir / "results_2024-05-01T10-00-00.json").write_text(json.dumps({
        "results": {"hellaswag": {"alias": "hellaswag", "acc,none": 0.51, "acc_stderr,none": 0.01,
                                  "acc_norm,none": 0.6}}}))
    assert read_lm_eval_results(tmp_path) == {"hellaswag": ("acc", 0.51)}
    with pytest.raises(InputError):
        read_lm_eval_results(tmp_path / "nothing")


def test_builtin_scoring_modes():
    assert exact_match(" 7\nmore", "7") and not exact_match("", "7")
    gen = score_records("d", "gen", [{"prediction": "5", "answer": "5"}, {"prediction": "x", "answer": "5"}])
    assert (gen.metric, gen.correct, gen.total) == ("em", 1.0, 2)
    ppl = score_records("d", "ppl", [{"prediction": 1, "label": 1}, {"prediction": 0, "label": 1}])
    assert (ppl.metric, ppl.correct) == ("acc", 1.0)
    code = score_records("d", "code", [
        {"prompt": "def f(x):\n", "prediction": "    return x + 1\n", "entry_point": "f",
         "test": "def check(c):\n    assert c(1) == 2\n"},
        {"prompt": "def f(x):\n", "prediction": "    while True: pass\n", "entry_point": "f",
         "test": "def check(c):\n    assert c(1) == 2\n"}], workers=2)
    assert (code.metric, code.correct, code.total) == ("pass@1", 1.0, 2)


def test_builtin_backend_runs_the_tiny_model(tmp_path):
    import string

    from slurm_acme.evaluate.backends.builtin import BuiltinModel, predict_shard
    from slurm_acme.evaluate.registry import load_registry
    from slurm_acme.models.tiny_gpt import CharTokenizer, TinyGPT, TinyGPTConfig, save_pretrained

    tok = CharTokenizer(sorted(set(string.printable)))
    save_pretrained(TinyGPT(TinyGPTConfig(vocab_size=tok.vocab_size)), tok, tmp_path / "ckpt")
    model = BuiltinModel(tmp_path / "ckpt")
    reg = load_registry()
    out = tmp_path / "pred.jsonl"
    timing = predict_shard(model, reg.datasets["tiny_choice"].path, 2, 6, "ppl", out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert timing["examples"] == 4 and [r["id"] for r in rows] == ["p2", "p3", "p4", "p5"]
    assert all(r["prediction"] in (0, 1) for r in rows)
    predict_shard(model, reg.datasets["tiny_code"].path, 0, 2, "gen", out)
    assert all(isinstance(json.loads(line)["prediction"], str) for line in out.read_text().splitlines())
