"""seval's allocation mode (for job_container/tmpfs sites) on the local cluster:
one allocation per node preloads and runs its trials as srun steps."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_this_cluster_has_no_private_tmpfs_so_auto_picks_jobs_mode(slurm_cluster):
    from slurm_acme.evaluate.container import job_container_type, mode_for, read_show_config

    kind = job_container_type(read_show_config())
    # No container plugin, in each release's words: 22.05 "job_container/none", 24.11 "(null)".
    assert kind == ("job_container/none" if slurm_cluster.version < (24, 11) else "")
    assert mode_for(kind, "/dev/shm/acme-eval") == "jobs"


def test_allocation_mode_runs_trials_as_steps_of_one_job_per_node(slurm_cluster, tmp_path, wait_job):
    from slurm_acme.models.tiny_gpt import CharTokenizer, TinyGPT, TinyGPTConfig, save_pretrained
    from slurm_acme.slurm import Slurm
    from slurm_acme.store import evaluate as store_eval
    from slurm_acme.store import open_store

    tok = CharTokenizer(sorted(set(string.printable)))
    ckpt = save_pretrained(TinyGPT(TinyGPTConfig(vocab_size=tok.vocab_size)), tok, tmp_path / "ckpt")
    config = tmp_path / "acme.toml"
    config.write_text(f'[evaluate]\nwork_dir = "{tmp_path / "work"}"\n'
                      f'local_dir = "/dev/shm/acme-seval-alloc-{uuid.uuid4().hex[:8]}"\n'
                      'gpus_per_node = 2\ntrial_overhead_s = 3.0\ntime_limit = "00:10:00"\n')
    db = f"sqlite:///{tmp_path / 'acme.db'}"
    bindir = Path(sys.executable).parent
    proc = subprocess.run([str(bindir / "seval"), "--config", str(config), "--db", db, str(ckpt),
                           "--datasets", "tiny_choice,tiny_arith", "--nodes", "1", "--mode", "allocation",
                           "--json"],
                          env={**slurm_cluster.env, "PATH": f"{bindir}:{os.environ['PATH']}"},
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    submitted = json.loads(proc.stdout)
    assert set(submitted["job_ids"]) == {"node-0", "score-0", "aggregate"}
    slurm = Slurm(timeout=60)
    wait_job(slurm, submitted["job_ids"]["aggregate"], timeout=300, poll=2)
    store = open_store(db)
    run = store_eval.get_run(store, submitted["eval_id"])
    assert run.state == "COMPLETED" and run.mode == "allocation"
    assert {r.dataset for r in store_eval.results(store, run.eval_id)} == {"tiny_choice", "tiny_arith"}
    # every trial ran as a step of the node allocation, from its node-local copy
    work = tmp_path / "work" / run.eval_id
    timings = [json.loads(p.read_text()) for p in (work / "timing").glob("t*.json")]
    assert timings and {t["job_id"] for t in timings} == {submitted["job_ids"]["node-0"]}
    assert all(t["node_local"] for t in timings)
