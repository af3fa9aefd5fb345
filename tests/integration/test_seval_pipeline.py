"""seval end to end on the local Slurm cluster with the tiny model.

One evaluation of the shipped ``tiny`` datasets on 2 nodes x 2 GPU slots:
preload per node, GPU trial arrays, aftercorr CPU scoring arrays, aggregate,
cleanup; then results and measured priors in the store, and sacct showing
the GPUs released before the last scoring finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def evaluation(slurm_cluster, tmp_path_factory, wait_job):  # type: ignore[no-untyped-def]
    from slurm_acme.models.tiny_gpt import CharTokenizer, TinyGPT, TinyGPTConfig, save_pretrained
    from slurm_acme.slurm import Slurm

    base = tmp_path_factory.mktemp("seval")
    ckpt = base / "ckpt"
    import string

    tok = CharTokenizer(sorted(set(string.printable)))
    save_pretrained(TinyGPT(TinyGPTConfig(vocab_size=tok.vocab_size)), tok, ckpt)
    local_dir = f"/dev/shm/acme-seval-test-{uuid.uuid4().hex[:8]}"
    config = base / "acme.toml"
    config.write_text(f'[evaluate]\nwork_dir = "{base / "work"}"\nlocal_dir = "{local_dir}"\n'
                      "gpus_per_node = 2\ntrial_overhead_s = 3.0\ntime_limit = \"00:10:00\"\n")
    db = f"sqlite:///{base / 'acme.db'}"
    started = datetime.now(timezone.utc) - timedelta(seconds=5)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "seval"), "--config", str(config), "--db", db, str(ckpt),
         "--datasets", "tiny", "--nodes", "2", "--json"],
        env={**slurm_cluster.env, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    submitted = json.loads(proc.stdout)
    slurm = Slurm(timeout=60)
    wait_job(slurm, submitted["job_ids"]["aggregate"], timeout=400, poll=2)
    for key in ("cleanup-0", "cleanup-1"):
        wait_job(slurm, submitted["job_ids"][key], timeout=60, poll=1)
    return {"submitted": submitted, "db": db, "ckpt": ckpt, "work": base / "work", "local_dir": local_dir,
            "started": started, "config": config, "slurm": slurm}


def test_results_land_in_the_store(evaluation):
    from slurm_acme.store import evaluate as store_eval
    from slurm_acme.store import open_store

    store = open_store(evaluation["db"])
    run = store_eval.get_run(store, evaluation["submitted"]["eval_id"])
    assert run is not None and run.state == "COMPLETED"
    rows = {r.dataset: r for r in store_eval.results(store, run.eval_id)}
    assert set(rows) == {"tiny_arith", "tiny_copy", "tiny_choice", "tiny_code"}
    assert rows["tiny_code"].metric == "pass@1" and rows["tiny_choice"].metric == "acc"
    assert rows["tiny_choice"].examples == 20 and 0.0 <= rows["tiny_choice"].score <= 1.0
    assert all(r.gpu_s > 0 for r in rows.values())
    assert rows["tiny_code"].cpu_s > 0


def test_trials_ran_from_the_node_local_copy_which_cleanup_removed(evaluation):
    work = evaluation["work"] / evaluation["submitted"]["eval_id"]
    timings = [json.loads(p.read_text()) for p in (work / "timing").glob("t*.json")]
    assert timings and all(t["node_local"] for t in timings)
    assert (work / "timing" / "preload-0.json").exists() and (work / "timing" / "preload-1.json").exists()
    assert not Path(evaluation["local_dir"], evaluation["submitted"]["eval_id"]).exists()


def test_measured_runtimes_feed_the_next_plan(evaluation):
    from slurm_acme.config import load_config
    from slurm_acme.evaluate import service
    from slurm_acme.evaluate.priors import measured_priors
    from slurm_acme.store import open_store

    store = open_store(evaluation["db"])
    size = service.model_size_b(evaluation["ckpt"])
    measured = measured_priors(store, size)
    assert {n: p.samples for n, p in measured.items()} == {
        "tiny_arith": 1, "tiny_copy": 1, "tiny_choice": 1, "tiny_code": 1}
    cfg = load_config(evaluation["config"]).evaluate
    again = service.prepare(cfg, str(evaluation["ckpt"]), "tiny", nodes=["node1", "node2"],
                            measured=measured, db_url=evaluation["db"], size_b=size)
    assert set(again.prior_sources.values()) == {"measured"}
    assert again.plan.total_gpu_s == pytest.approx(sum(p.gpu_s for p in measured.values()))


def test_sacct_shows_gpus_released_before_the_last_scoring_ends(evaluation, wait_accounted):
    ids = evaluation["submitted"]["job_ids"]
    gpu_arrays = {ids["gpu-0"], ids["gpu-1"]}
    score_arrays = {ids["score-0"], ids["score-1"]}
    work = evaluation["work"] / evaluation["submitted"]["eval_id"]
    trials = json.loads((work / "spec.json").read_text())["trials"]
    per_node = {node: sum(t["node"] == node for t in trials) for node in (0, 1)}
    # scontrol said every job ended; sacct's windowed query may still lack a task for seconds
    jobs = wait_accounted(evaluation["slurm"], [], array_tasks={
        **{ids[f"gpu-{n}"]: per_node[n] for n in (0, 1)}, **{ids[f"score-{n}"]: per_node[n] for n in (0, 1)}})
    gpu = [j for j in jobs if j.array_job_id in gpu_arrays]
    score = [j for j in jobs if j.array_job_id in score_arrays]
    assert len(gpu) == len(score) >= 4
    assert all(j.state.value == "COMPLETED" for j in gpu + score)
    assert all(j.gpus == 1 for j in gpu) and all(j.gpus == 0 for j in score)
    last_gpu_end = max(j.end for j in gpu)
    last_score_end = max(j.end for j in score)
    assert last_gpu_end <= last_score_end
    # decoupling: some trial was being scored on CPUs while later trials still ran on GPUs
    assert any(s.start < g.end and g.start <= s.start for s in score for g in gpu)
    # aftercorr: each scoring task starts only after its own GPU task ended.
    for node in (0, 1):
        gpu_end = {j.array_task_id: j.end for j in gpu if j.array_job_id == ids[f"gpu-{node}"]}
        for j in (s for s in score if s.array_job_id == ids[f"score-{node}"]):
            assert j.start >= gpu_end[j.array_task_id]
    # the precise clocks of the steps: every trial's GPU part ended before its scoring did
    for path in (work / "score").glob("t*.json"):
        scored = json.loads(path.read_text())
        timing = json.loads((work / "timing" / path.name).read_text())
        assert timing["ended"] < scored["ended"]


def test_results_and_status_commands_read_the_store(evaluation):
    exe = str(Path(sys.executable).parent / "seval")
    out = subprocess.run([exe, "--db", evaluation["db"], "results", str(evaluation["ckpt"]), "--json"],
                         capture_output=True, text=True, timeout=60, check=True)
    doc = json.loads(out.stdout)
    assert doc["eval_id"] == evaluation["submitted"]["eval_id"] and len(doc["results"]) == 4
    out = subprocess.run([exe, "--db", evaluation["db"], "status", "--json"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout)[0]["state"] == "COMPLETED"
