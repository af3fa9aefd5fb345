"""Planning for the external backends: names checked against the tool, options, dry runs,
status of failed jobs, and the evaluation state vocabulary."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_acme.cli.main import run_cli
from slurm_acme.cli.seval import seval
from slurm_acme.config import EvaluateConfig
from slurm_acme.errors import InputError
from slurm_acme.evaluate import service
from slurm_acme.evaluate.backends.catalogue import Catalogue
from slurm_acme.evaluate.packing import first_fit_decreasing
from slurm_acme.evaluate.registry import load_registry
from slurm_acme.evaluate.states import EvalState, TrialState

LM_TASKS = Catalogue("lm-eval", frozenset({"hellaswag", "arc_easy", "social_iqa", "siqa_ca", "piqa", "boolq"}))


@pytest.fixture
def tools(tmp_path):  # type: ignore[no-untyped-def]
    """A venv-like bin folder with lm_eval and opencompass console scripts beside its python."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    for name in ("lm_eval", "opencompass"):
        (bin_dir / name).write_text(f"#!{bin_dir / 'python'}\nraise SystemExit(0)\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


@pytest.fixture
def ckpt(tmp_path):  # type: ignore[no-untyped-def]
    folder = tmp_path / "step-100"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\0" * 4000)
    return folder


def _cfg(tmp_path, **kw):  # type: ignore[no-untyped-def]
    return EvaluateConfig(work_dir=str(tmp_path / "work"), local_dir="/dev/shm/acme", gpus_per_node=2, **kw)


def test_unknown_tool_names_are_rejected_at_plan_time_with_the_nearest(tmp_path, tools, ckpt):
    registry = tmp_path / "mine.csv"
    registry.write_text("name,num_examples,mode,metric,cpu_heavy,oc_cost_units,lm_eval_task\n"
                        "myqa,10,ppl,acc,no,20,siqa\n")
    cfg = _cfg(tmp_path, datasets_files=[str(registry)])
    with pytest.raises(InputError, match=r"myqa: lm-eval has no task .siqa. \(nearest: piqa, siqa_ca, social_iqa\)"):
        service.prepare(cfg, str(ckpt), "myqa", nodes=["n1"], db_url="sqlite://", backend="lm-eval",
                        catalogue=LM_TASKS, python=str(tools / "python"))
    with pytest.raises(InputError, match="myqa: no lm-eval task is mapped"):
        registry.write_text("name,num_examples,mode,metric,cpu_heavy,oc_cost_units,lm_eval_task\n"
                            "myqa,10,ppl,acc,no,20,\n")
        service.prepare(cfg, str(ckpt), "myqa,hellaswag", nodes=["n1"], db_url="sqlite://", backend="lm-eval",
                        catalogue=LM_TASKS, python=str(tools / "python"))


def test_a_dataset_lm_eval_cannot_run_is_refused_with_the_registrys_reason(tmp_path, tools, ckpt):
    with pytest.raises(InputError) as err:
        service.prepare(_cfg(tmp_path), str(ckpt), "mtbench,hellaswag", nodes=["n1"], db_url="sqlite://",
                        backend="lm-eval", catalogue=LM_TASKS, python=str(tools / "python"))
    assert str(err.value) == ("--datasets: mtbench: scored by an LLM judge (GPT-4 single-answer grading of "
                              "two turns); lm-eval has no judge; use --backend opencompass")


def test_the_shipped_lm_eval_tasks_reach_lm_eval_as_its_include_path(tmp_path, tools, ckpt):
    from slurm_acme.evaluate.backends.harness import prepare_run_dir
    from slurm_acme.evaluate.registry import shipped_lm_eval_tasks

    catalogue = Catalogue("lm-eval", LM_TASKS.names | {"clue_c3", "mine"})
    prepared = service.prepare(_cfg(tmp_path), str(ckpt), "C3,hellaswag", nodes=["n1"], db_url="sqlite://",
                               backend="lm-eval", catalogue=catalogue, python=str(tools / "python"), eval_id="e3")
    commands = [argv for _, _, argv in service.tool_commands(prepared)]
    assert {t for argv in commands for t in argv[argv.index("--tasks") + 1].split(",")} == {"clue_c3", "hellaswag"}
    for argv in commands:
        assert argv.count("--include_path") == 1
        assert argv[argv.index("--include_path") + 1] == str(shipped_lm_eval_tasks())
    # With the user's folder too, lm-eval (one --include_path) gets a union of both in the run dir.
    mine = tmp_path / "my-tasks"
    (mine / "sub").mkdir(parents=True)
    (mine / "sub" / "mine.yaml").write_text("task: mine\n")
    prepared = service.prepare(_cfg(tmp_path), str(ckpt), "C3", nodes=["n1"], db_url="sqlite://",
                               backend="lm-eval", catalogue=catalogue, python=str(tools / "python"), eval_id="e4",
                               tool_overrides={"task_paths": [str(mine)]})
    argv = service.tool_commands(prepared)[0][2]
    union = prepared.run_dir / "lm_eval_tasks"
    assert argv.count("--include_path") == 1 and argv[argv.index("--include_path") + 1] == str(union)
    assert not union.exists(), "a dry run writes nothing"
    prepared.run_dir.mkdir(parents=True)
    prepare_run_dir(prepared.spec, prepared.run_dir)
    user_copy = union / "0-my-tasks" / "sub" / "mine.yaml"
    assert user_copy.is_symlink() and user_copy.resolve() == (mine / "sub" / "mine.yaml").resolve()
    assert (union / "1-lm_eval_tasks" / "clue_c3.yaml").resolve() == shipped_lm_eval_tasks() / "clue_c3.yaml"
    assert not any(p.is_symlink() and p.is_dir() for p in union.rglob("*")), "lm-eval does not descend links"


def test_shipped_names_become_the_tools_names_and_a_trial_runs_them_together(tmp_path, tools, ckpt):
    prepared = service.prepare(_cfg(tmp_path), str(ckpt), "hellaswag,ARC-e,siqa", nodes=["n1"],
                               db_url="sqlite://", backend="lm-eval", catalogue=LM_TASKS,
                               python=str(tools / "python"), size_b=7.0, eval_id="e1",
                               tool_overrides={"num_fewshot": 5, "batch_size": "auto:4"})
    assert {n: d.tool_task for n, d in prepared.spec.datasets.items()} == {
        "hellaswag": "hellaswag", "ARC-e": "arc_easy", "siqa": "social_iqa"}
    commands = service.tool_commands(prepared)
    assert commands and all(step == "trial" for _, step, _ in commands), "lm-eval scores in the GPU job"
    argv = commands[0][2]
    assert argv[0] == str(tools / "lm_eval") and argv[argv.index("--num_fewshot") + 1] == "5"
    assert argv[argv.index("--batch_size") + 1] == "auto:4"
    local = prepared.spec.local_copy(0)
    assert argv[argv.index("--model_args") + 1] == f"pretrained={local}" and local.name == ckpt.name


def test_opencompass_scores_in_the_cpu_job_with_the_same_model_abbreviation(tmp_path, tools, ckpt):
    catalogue = Catalogue("opencompass", frozenset({"race_ppl"}), {"race_ppl": ("/oc/race_ppl.py",)},
                          {"race_ppl": ("race-middle", "race-high")})
    prepared = service.prepare(_cfg(tmp_path), str(ckpt), "race-middle,race-high", nodes=["n1"],
                               db_url="sqlite://", backend="opencompass", catalogue=catalogue,
                               python=str(tools / "python"), size_b=7.0, eval_id="e2")
    assert prepared.spec.datasets["race-middle"].tool_parts == ("race-middle",)
    steps = {(t, step): argv for t, step, argv in service.tool_commands(prepared)}
    for (_trial, step), argv in steps.items():
        mode = argv[argv.index("--mode") + 1]
        assert (step, mode) in (("trial", "infer"), ("score", "eval"))
        assert Path(argv[argv.index("--hf-path") + 1]).name == ckpt.name  # one abbreviation: <name>_hf
        assert argv.count("race_ppl") == 1


def test_code_datasets_are_refused_unless_the_tool_may_run_code(tmp_path, tools, ckpt):
    catalogue = Catalogue("lm-eval", frozenset({"humaneval"}))
    with pytest.raises(InputError, match="outside seval's sandbox"):
        service.prepare(_cfg(tmp_path), str(ckpt), "openai_humaneval", nodes=["n1"], db_url="sqlite://",
                        backend="lm-eval", catalogue=catalogue, python=str(tools / "python"))
    prepared = service.prepare(_cfg(tmp_path, allow_unsandboxed_code=True), str(ckpt),
                               "openai_humaneval", nodes=["n1"], db_url="sqlite://", backend="lm-eval",
                               catalogue=catalogue, python=str(tools / "python"))
    assert "--confirm_run_unsafe_code" in service.tool_commands(prepared)[0][2]


def test_a_missing_tool_is_a_plan_time_error_naming_where_it_looked(tmp_path, ckpt):
    with pytest.raises(InputError, match="beside the worker's Python"):
        service.prepare(_cfg(tmp_path), str(ckpt), "hellaswag", nodes=["n1"], db_url="sqlite://",
                        backend="lm-eval", catalogue=LM_TASKS, python=str(tmp_path / "nowhere" / "python"))
    with pytest.raises(InputError, match=r"evaluate\.lm_eval\.limit"):
        service.prepare(_cfg(tmp_path), str(ckpt), "hellaswag", nodes=["n1"], db_url="sqlite://",
                        backend="lm-eval", catalogue=LM_TASKS, tool_overrides={"limit": -1})


def test_cli_dry_run_prints_each_trials_tool_argv_and_touches_no_slurm_or_store(tmp_path, tools, ckpt,
                                                                               monkeypatch, capsys):
    import slurm_acme.evaluate.service as svc

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(svc, "load_catalogue", lambda tool, wanted: LM_TASKS)
    config = tmp_path / "acme.toml"
    config.write_text(f'[evaluate]\nwork_dir = "{tmp_path / "w"}"\n[evaluate.lm_eval]\n'
                      f'executable = "{tools / "lm_eval"}"\n')
    db = tmp_path / "never.db"
    code = run_cli(seval, "seval", ["--config", str(config), "--db", f"sqlite:///{db}", str(ckpt),
                                    "--datasets", "hellaswag,piqa", "--backend", "lm-eval",
                                    "--model-args", "dtype=float32", "--limit", "8", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "# lm-eval commands" in out and f"{tools / 'lm_eval'} run --model hf" in out
    assert "--limit 8" in out and "dtype=float32" in out and "--tasks " in out
    assert not db.exists(), "a dry run opens no store"


def test_status_names_failed_array_tasks_with_their_logs(tmp_path):
    from slurm_acme.evaluate.status import eval_status
    from slurm_acme.slurm.records import SacctJob
    from slurm_acme.slurm.states import JobState
    from slurm_acme.store.evaluate import EvalRun

    run_dir = tmp_path / "e1"
    (run_dir / "failed").mkdir(parents=True)
    (run_dir / "failed" / "t000-trial.json").write_text(json.dumps(
        {"trial": "t000", "step": "trial", "message": "lm_eval exited 1", "job_id": "101",
         "tool_log": str(run_dir / "logs" / "t000-infer.log")}))

    def rec(job_id: str, array: str | None, task: int | None, state: JobState) -> SacctJob:
        now = datetime.now(timezone.utc)
        return SacctJob(job_id, "c", "u", "n", "p", "a", "", 1, "node1", 0, 1, now, now, now, now, state, 1,
                        array_job_id=array, array_task_id=task)

    class Door:
        def squeue(self, ids):  # type: ignore[no-untyped-def]
            return []

        def sacct(self, start, job_ids=None):  # type: ignore[no-untyped-def]
            return [rec("100", None, None, JobState.COMPLETED), rec("101", "101", 0, JobState.FAILED),
                    rec("102", "101", 1, JobState.COMPLETED)]

    run = EvalRun("e1", "/ck", 0.1, 0.0, "PARTIAL", {"preload-0": "100", "gpu-0": "101"}, str(run_dir), "jobs", 1.0)
    found = eval_status(run, Door())
    assert found.jobs == {"preload-0": {"job_id": "100", "state": "COMPLETED"},
                          "gpu-0": {"job_id": "101", "state": "FAILED"}}
    (failure,) = found.failures
    assert failure.log == str(run_dir / "logs" / "seval-e1-gpu0-101_0.out")
    assert failure.tool_log.endswith("t000-infer.log") and failure.message == "lm_eval exited 1"


def test_cancel_is_planned_and_its_dry_run_prints_it(tmp_path, capsys):
    from slurm_acme.store import evaluate as store_eval
    from slurm_acme.store import open_store

    db = f"sqlite:///{tmp_path / 'a.db'}"
    store = open_store(db)
    store_eval.create_run(store, eval_id="e9", checkpoint="/ck", model_size_b=0.1, cluster="c", plan={},
                          job_ids={"gpu-0": "5", "aggregate": "6"}, run_dir=str(tmp_path / "none"), mode="jobs",
                          state=EvalState.SUBMITTED.value)
    store.dispose()
    assert run_cli(seval, "seval", ["--db", db, "cancel", "e9", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip() == "scancel 5 6"


def test_state_vocabulary():
    assert EvalState.parse("COMPLETED").is_terminal() and EvalState.parse("PARTIAL").is_terminal()
    assert not EvalState.parse("SUBMITTED").is_terminal() and EvalState.parse("weird") is EvalState.UNKNOWN
    assert EvalState.COMPLETED == "COMPLETED"
    assert TrialState.parse("FAILED").is_terminal() and not TrialState.parse("INFERRED").is_terminal()


def test_first_fit_decreasing_packs_largest_first_under_the_cap():
    assert first_fit_decreasing([3, 7, 2, 5, 1], float, 8) == [[7, 1], [5, 3], [2]]
    assert first_fit_decreasing([9], float, 8) == [[9]]


def test_every_shipped_dataset_names_an_opencompass_config_and_an_lm_eval_task_or_why_not():
    shipped = load_registry(include_tiny=False).select("all")
    assert len(shipped) == 63 and all(d.opencompass_config for d in shipped)
    assert all(bool(d.lm_eval_task) != bool(d.lm_eval_unsupported) for d in shipped)
    assert sum(bool(d.lm_eval_task) for d in shipped) == 58
    unsupported = {d.name: d.lm_eval_unsupported for d in shipped if d.lm_eval_unsupported}
    assert set(unsupported) == {"alpaca_eval", "mtbench", "ds1000", "GaokaoBench", "flores_100"}
    assert "LLM judge" in unsupported["alpaca_eval"] and "LLM judge" in unsupported["mtbench"]
    assert "execution harness" in unsupported["ds1000"]
