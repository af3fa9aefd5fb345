"""OpenCompass / lm-eval command templates and output readers; builtin scoring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_acme.errors import InputError
from slurm_acme.evaluate.backends.external import (
    ToolRun,
    TrialFailed,
    allocation_gpus,
    check_opencompass_inference,
    check_options,
    lm_eval_argv,
    lm_eval_first_request_ts,
    opencompass_abbr,
    opencompass_argv,
    opencompass_infer_times,
    read_lm_eval_results,
    read_opencompass_results,
    resolve_executable,
    tool_python,
)
from slurm_acme.evaluate.scoring import exact_match, score_records

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
OC = ToolRun("opencompass", "/venv/bin/opencompass", task_paths=("/my/oc",), model_args=("trust_remote_code=True",),
             batch_size="4", max_out_len=16)
LM = ToolRun("lm-eval", "/venv/bin/lm_eval", task_paths=("/my/tasks",), model_args=("dtype=float32",),
             num_fewshot=5, limit=20, batch_size="auto")


def test_opencompass_infer_then_eval_command_lines():
    infer = opencompass_argv(OC, "/dev/shm/e/n1/ck", ["mmlu_ppl", "gsm8k_gen", "mmlu_ppl"], "/w/t000",
                             mode="infer", gpus=1)
    assert infer[:4] == ["/venv/bin/opencompass", "--datasets", "mmlu_ppl", "gsm8k_gen"]
    assert infer[infer.index("--hf-path") + 1] == "/dev/shm/e/n1/ck"
    assert infer[infer.index("--mode") + 1] == "infer" and "--reuse" not in infer
    assert infer[infer.index("--hf-num-gpus") + 1] == "1" and infer[infer.index("--batch-size") + 1] == "4"
    assert infer[infer.index("--config-dir") + 1] == "/my/oc"
    assert infer[infer.index("--model-kwargs") + 1] == "trust_remote_code=True"
    evaluate = opencompass_argv(OC, "/ckpt/ck", ["mmlu_ppl"], "/w/t000", mode="eval", gpus=0)
    assert evaluate[evaluate.index("--mode") + 1] == "eval" and evaluate[-2:] == ["--reuse", "latest"]
    assert opencompass_abbr("/dev/shm/e/n1/ck") == opencompass_abbr("/ckpt/ck/") == "ck_hf"
    with pytest.raises(InputError):
        opencompass_argv(OC, "/m", ["x"], "/w", mode="all", gpus=0)


def test_lm_eval_command_line_passes_the_options_and_the_allocations_device():
    argv = lm_eval_argv(LM, "/dev/shm/m", ["hellaswag", "arc_easy"], "/w/out", gpus=1)
    assert argv[:4] == ["/venv/bin/lm_eval", "run", "--model", "hf"]
    assert argv[argv.index("--model_args") + 1] == "pretrained=/dev/shm/m,dtype=float32"
    assert argv[argv.index("--tasks") + 1] == "hellaswag,arc_easy"
    assert argv[argv.index("--output_path") + 1] == "/w/out" and "--log_samples" in argv
    assert argv[argv.index("--include_path") + 1] == "/my/tasks"
    assert argv[argv.index("--num_fewshot") + 1] == "5" and argv[argv.index("--limit") + 1] == "20"
    assert argv[argv.index("--batch_size") + 1] == "auto" and argv[argv.index("--device") + 1] == "cuda:0"
    assert lm_eval_argv(LM, "/m", ["x"], "/o", gpus=0)[argv.index("--device") + 1] == "cpu"
    assert "--confirm_run_unsafe_code" not in argv


def test_device_comes_from_the_allocation():
    assert allocation_gpus({"CUDA_VISIBLE_DEVICES": "3"}) == 1
    assert allocation_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert allocation_gpus({}) == 0 and allocation_gpus({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == 0


def test_options_a_tool_cannot_take_are_refused_by_name():
    with pytest.raises(InputError, match=r"evaluate\.opencompass\.num_fewshot"):
        check_options(ToolRun("opencompass", "/x", num_fewshot=3))
    with pytest.raises(InputError, match="takes one --include_path"):
        check_options(ToolRun("lm-eval", "/x", task_paths=("/a", "/b")))
    with pytest.raises(InputError, match="batch_size"):
        check_options(ToolRun("lm-eval", "/x", batch_size="many"))
    check_options(LM)


def test_executables_resolve_beside_the_interpreter_or_as_configured(tmp_path):
    bin_dir = tmp_path / "venv-bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text("")
    tool = bin_dir / "lm_eval"
    tool.write_text(f"#!{bin_dir}/python\nimport sys\n")
    tool.chmod(0o755)
    assert resolve_executable("lm-eval", "", str(bin_dir / "python")) == str(tool)
    assert resolve_executable("lm-eval", str(tool), "/usr/bin/python3") == str(tool)
    assert tool_python(str(tool)) == f"{bin_dir}/python"
    with pytest.raises(InputError, match="beside the worker's Python"):
        resolve_executable("opencompass", "", str(bin_dir / "python"))
    with pytest.raises(InputError, match="must be an absolute path"):
        resolve_executable("lm-eval", "lm_eval", "/usr/bin/python3")


def test_reads_lm_eval_results_by_metric_name_not_the_first_number(tmp_path):
    scores = read_lm_eval_results(FIXTURES / "lm_eval", ["acme_tiny_mc", "acme_tiny_gen"])
    # the file lists sample_len first: the metric is the task's declared one
    assert scores["acme_tiny_mc"].metric == "acc,none" and scores["acme_tiny_mc"].value == pytest.approx(11 / 12)
    assert scores["acme_tiny_gen"].metric == "exact_match,strip"
    assert scores["acme_tiny_gen"].value == pytest.approx(0.1)
    assert (scores["acme_tiny_mc"].n, scores["acme_tiny_gen"].n) == (12, 10)
    with pytest.raises(TrialFailed, match="no result for task 'mmlu'"):
        read_lm_eval_results(FIXTURES / "lm_eval", ["mmlu"])
    with pytest.raises(TrialFailed, match="no results_"):
        read_lm_eval_results(tmp_path, ["acme_tiny_mc"])


def test_lm_eval_group_sums_its_subtasks_samples(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "results_2024-01-01T00-00-00.json").write_text(json.dumps({
        "results": {"g": {"acc,none": 0.5, "acc_stderr,none": 0.1}, "a": {"acc,none": 0.4}, "b": {"acc,none": 0.6}},
        "group_subtasks": {"g": ["a", "b"]}, "higher_is_better": {"g": {"acc": True}},
        "n-samples": {"a": {"original": 10, "effective": 10}, "b": {"original": 30, "effective": 30}}}))
    assert read_lm_eval_results(tmp_path, ["g"])["g"].n == 40


def test_lm_eval_log_marks_when_requests_began():
    text = (FIXTURES / "lm_eval" / "lm_eval.log").read_text()
    first = lm_eval_first_request_ts(text)
    assert first is not None and lm_eval_first_request_ts("nothing") is None


def test_reads_opencompass_summary_metric_at_full_precision():
    out = read_opencompass_results(FIXTURES / "opencompass", "tiny-hf_hf",
                                   {"tiny_mc": ("acme_tiny_mc",), "tiny_gen": ("acme_tiny_gen",)})
    assert out["tiny_mc"].metric == "accuracy" and out["tiny_mc"].value == pytest.approx(700 / 12)
    assert out["tiny_gen"].metric == "score" and out["tiny_gen"].value == 0.0
    assert (out["tiny_mc"].n, out["tiny_gen"].n) == (12, 10)


def test_opencompass_infer_that_wrote_nothing_is_a_failed_trial(tmp_path):
    assert check_opencompass_inference(FIXTURES / "opencompass", "tiny-hf_hf",
                                       ["acme_tiny_mc", "acme_tiny_gen"]) == {"acme_tiny_mc": 12, "acme_tiny_gen": 10}
    with pytest.raises(TrialFailed, match="wrote no predictions for 'mmlu'"):
        check_opencompass_inference(FIXTURES / "opencompass", "tiny-hf_hf", ["mmlu"])
    with pytest.raises(TrialFailed, match="no timestamped run folder"):
        check_opencompass_inference(tmp_path, "tiny-hf_hf", ["x"])
    with pytest.raises(TrialFailed, match="has no result for 'x'"):
        read_opencompass_results(FIXTURES / "opencompass", "tiny-hf_hf", {"x": ("x",)})


def test_opencompass_logged_load_and_inference_times():
    load, inference = opencompass_infer_times(FIXTURES / "opencompass", "tiny-hf_hf")
    assert load == 1.0 and inference == pytest.approx(0.97)


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
