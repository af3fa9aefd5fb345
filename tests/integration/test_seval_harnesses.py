"""``seval`` drives the real lm-evaluation-harness and OpenCompass on the local cluster.

An evaluation owner's world (built by ``harness_world``): a Hugging Face GPT-2
made here, a multiple-choice log-likelihood task and a generate-until task as
local files, each tool's own task definitions, and a registry file naming them.
``seval --backend lm-eval`` and ``seval --backend opencompass`` evaluate it end
to end (preload, GPU trial array, CPU scoring array, aggregate); then each tool
is run directly on the same model and tasks, and the numbers seval stored must
be the numbers the tool reports. A task that breaks at run time shows up in
``seval status`` with the failing job and its logs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from harness_world import CHOICE_TASK, GEN_TASK, OC_CHOICE, OC_GEN, OFFLINE_ENV, build_world

#: Setting up both evaluations and the direct runs takes minutes on a loaded 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

BIN = Path(sys.executable).parent
SEVAL = str(BIN / "seval")


@pytest.fixture(scope="module")
def world(tmp_path_factory):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("harness")
    w = build_world(base)
    local_dir = f"/dev/shm/acme-harness-test-{uuid.uuid4().hex[:8]}"
    config = base / "acme.toml"
    config.write_text(
        f'[evaluate]\nwork_dir = "{base / "work"}"\nlocal_dir = "{local_dir}"\n'
        f'datasets_files = ["{w.registry}"]\ngpus_per_node = 1\ntrial_overhead_s = 3.0\n'
        'time_limit = "00:15:00"\n'
        f'[evaluate.lm_eval]\ntask_paths = ["{w.include_path}"]\n'
        f'[evaluate.opencompass]\ntask_paths = ["{w.config_dir}"]\n', encoding="utf-8")
    yield {"w": w, "base": base, "config": config, "db": f"sqlite:///{base / 'acme.db'}",
           "env": {**os.environ, **OFFLINE_ENV}}
    shutil.rmtree(local_dir, ignore_errors=True)  # the cleanup jobs removed what was inside


def _seval(world, slurm_cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {**slurm_cluster.env, **world["env"], "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run([SEVAL, "--config", str(world["config"]), "--db", world["db"], *args], env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def evaluations(world, slurm_cluster, wait_accounted):  # type: ignore[no-untyped-def]
    """Both backends submitted at once, the direct tool runs done while they run, then waited for.
    One GPU slot: both tasks go into one trial, so each tool runs once per step (and the
    readers see two tasks in one output)."""
    from slurm_acme.slurm import Slurm

    model = str(world["w"].model)
    submitted = {}
    for backend in ("lm-eval", "opencompass"):
        proc = _seval(world, slurm_cluster, model, "--datasets", "mine", "--backend", backend, "--nodes", "1",
                      "--json")
        submitted[backend] = json.loads(proc.stdout)
    direct = {"lm-eval": _lm_eval_directly(world), "opencompass": _opencompass_directly(world)}
    slurm = Slurm(timeout=60)  # the jobs may have ended long ago: ask accounting, not scontrol
    wait_accounted(slurm, [doc["job_ids"]["aggregate"] for doc in submitted.values()], timeout=900, poll=3)
    return {"submitted": submitted, "direct": direct, "slurm": slurm}


def _lm_eval_directly(world) -> dict[str, tuple[str, float, int]]:  # type: ignore[no-untyped-def]
    out = world["base"] / "direct-lm-eval"
    w = world["w"]
    subprocess.run([str(BIN / "lm_eval"), "run", "--model", "hf", "--model_args", f"pretrained={w.model}",
                    "--tasks", f"{CHOICE_TASK},{GEN_TASK}", "--device", "cpu", "--batch_size", "1",
                    "--output_path", str(out), "--log_samples", "--include_path", str(w.include_path)],
                   env=world["env"], capture_output=True, timeout=900, check=True)
    doc = json.loads(next(out.rglob("results_*.json")).read_text())
    return {CHOICE_TASK: ("acc,none", doc["results"][CHOICE_TASK]["acc,none"],
                          doc["n-samples"][CHOICE_TASK]["effective"]),
            GEN_TASK: ("exact_match,strip", doc["results"][GEN_TASK]["exact_match,strip"],
                       doc["n-samples"][GEN_TASK]["effective"])}


def _opencompass_directly(world) -> dict[str, tuple[str, float, int]]:  # type: ignore[no-untyped-def]
    out = world["base"] / "direct-opencompass"
    w = world["w"]
    common = [str(BIN / "opencompass"), "--datasets", OC_CHOICE, OC_GEN, "--hf-type", "base",
              "--hf-path", str(w.model), "--work-dir", str(out), "--max-num-workers", "1", "--hf-num-gpus", "0",
              "--batch-size", "1", "--max-out-len", "256", "--config-dir", str(w.config_dir)]
    subprocess.run([*common, "--mode", "infer"], env=world["env"], capture_output=True, timeout=900, check=True)
    subprocess.run([*common, "--mode", "eval", "--reuse", "latest"], env=world["env"], capture_output=True,
                   timeout=900, check=True)
    run = next(p for p in out.iterdir() if p.is_dir())
    model = f"{w.model.name}_hf"
    found = {}
    for abbr, metric in ((CHOICE_TASK, "accuracy"), (GEN_TASK, "score")):
        value = json.loads((run / "results" / model / f"{abbr}.json").read_text())[metric]
        n = len(json.loads((run / "predictions" / model / f"{abbr}.json").read_text()))
        found[abbr] = (metric, value / 100.0, n)
    return found


def _stored(world, eval_id: str):  # type: ignore[no-untyped-def]
    from slurm_acme.store import evaluate as store_eval
    from slurm_acme.store import open_store

    store = open_store(world["db"])
    try:
        return store_eval.get_run(store, eval_id), {r.dataset: r for r in store_eval.results(store, eval_id)}, \
            store_eval.trials(store, eval_id)
    finally:
        store.dispose()


@pytest.mark.parametrize("backend", ["lm-eval", "opencompass"])
def test_seval_stores_the_numbers_the_tool_reports_run_directly(world, evaluations, backend):
    run, results, _ = _stored(world, evaluations["submitted"][backend]["eval_id"])
    assert run.state == "COMPLETED"
    direct = evaluations["direct"][backend]
    stored = {name: (r.metric, r.score, r.examples) for name, r in results.items()}
    print(json.dumps({"backend": backend, "seval": stored, "direct": direct}))
    assert set(stored) == {CHOICE_TASK, GEN_TASK}
    for name, (metric, value, n) in direct.items():
        assert stored[name][0] == metric
        assert stored[name][1] == value, f"{name}: seval stored {stored[name][1]}, {backend} reports {value}"
        assert stored[name][2] == n == (world["w"].choice_n if name == CHOICE_TASK else world["w"].gen_n)


@pytest.mark.parametrize("backend", ["lm-eval", "opencompass"])
def test_trials_split_load_inference_and_scoring_time(world, evaluations, backend):
    _, results, trials = _stored(world, evaluations["submitted"][backend]["eval_id"])
    assert trials and all(t["state"] == "SCORED" for t in trials)
    assert all(t["load_s"] > 0 and t["gpu_s"] >= 0 and t["cpu_s"] > 0 for t in trials)
    assert all(t["load_s"] + t["gpu_s"] <= t["gpu_end_ts"] - t["gpu_start_ts"] + 1e-6 for t in trials)
    if backend == "opencompass":  # scoring is OpenCompass --mode eval in the CPU job: real seconds
        assert sum(r.cpu_s for r in results.values()) > 1.0


@pytest.mark.parametrize("backend", ["lm-eval", "opencompass"])
def test_dry_run_printed_the_argv_the_trial_ran(world, evaluations, slurm_cluster, backend):
    eval_id = evaluations["submitted"][backend]["eval_id"]
    run_dir = world["base"] / "work" / eval_id
    timing = json.loads(next((run_dir / "timing").glob("t*.json")).read_text())
    node = json.loads((run_dir / "spec.json").read_text())["nodes"][0]
    dry = json.loads(_seval(world, slurm_cluster, str(world["w"].model), "--datasets", "mine", "--backend",
                            backend, "--nodelist", node, "--dry-run", "--json").stdout)
    printed = {c["trial"]: c["argv"] for c in dry["tool_commands"] if c["step"] == "trial"}
    device = "--device" if backend == "lm-eval" else "--hf-num-gpus"

    def same_but_device(argv: list[str]) -> list[str]:  # the emulated GPUs are no CUDA devices: cpu / 0
        return [a for i, a in enumerate(argv) if i == 0 or argv[i - 1] != device]

    expected = [a.replace(dry["eval_id"], eval_id) for a in printed[timing["trial"]]]
    assert same_but_device(expected) == same_but_device(timing["argv"])
    assert expected[expected.index(device) + 1] in ("cuda:0", "1")
    assert timing["argv"][timing["argv"].index(device) + 1] in ("cpu", "0")


def test_status_names_the_failing_job_and_its_logs(world, slurm_cluster, wait_job):
    from slurm_acme.slurm import Slurm

    broken = world["base"] / "broken"
    broken.mkdir()
    (broken / "acme_broken.yaml").write_text(
        "task: acme_broken\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {json.dumps(str(broken / 'missing.jsonl'))}\ntest_split: test\n"
        'output_type: generate_until\ndoc_to_text: "{{q}}"\ndoc_to_target: "{{a}}"\n', encoding="utf-8")
    registry = broken / "broken.csv"
    registry.write_text("name,num_examples,mode,metric,cpu_heavy,oc_cost_units,lm_eval_task\n"
                        "acme_broken,5,gen,exact match,no,5,acme_broken\n", encoding="utf-8")
    config = broken / "acme.toml"
    config.write_text(world["config"].read_text().replace(
        f'datasets_files = ["{world["w"].registry}"]', f'datasets_files = ["{registry}"]').replace(
        f'task_paths = ["{world["w"].include_path}"]', f'task_paths = ["{broken}"]'), encoding="utf-8")
    env = {**slurm_cluster.env, **world["env"]}
    proc = subprocess.run([SEVAL, "--config", str(config), "--db", world["db"], str(world["w"].model),
                           "--datasets", "acme_broken", "--backend", "lm-eval", "--json"],
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    submitted = json.loads(proc.stdout)
    wait_job(Slurm(timeout=60), submitted["job_ids"]["aggregate"], timeout=900, poll=3)
    status = subprocess.run([SEVAL, "--config", str(config), "--db", world["db"], "status", submitted["eval_id"],
                             "--json"], env=env, capture_output=True, text=True, timeout=120, check=True)
    doc = json.loads(status.stdout)
    assert doc["state"] == "PARTIAL"
    failed = [f for f in doc["failures"] if f["job"] == "gpu-0"]
    assert failed and failed[0]["state"] == "FAILED" and failed[0]["task"] == 0
    assert Path(failed[0]["log"]).is_file() and "lm_eval exited" in Path(failed[0]["log"]).read_text()
    assert Path(failed[0]["tool_log"]).is_file() and "missing.jsonl" in Path(failed[0]["tool_log"]).read_text()
    text = subprocess.run([SEVAL, "--config", str(config), "--db", world["db"], "status", submitted["eval_id"]],
                          env=env, capture_output=True, text=True, timeout=120, check=True).stdout
    assert f"failed: gpu-0 job {submitted['job_ids']['gpu-0']}_0 FAILED: log {failed[0]['log']}" in text
