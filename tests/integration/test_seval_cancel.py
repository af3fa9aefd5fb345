"""``seval cancel`` stops every job of an evaluation and marks it cancelled."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_cancel_removes_every_job_from_the_queue(slurm_cluster, tmp_path):
    from slurm_acme.models.tiny_gpt import CharTokenizer, TinyGPT, TinyGPTConfig, save_pretrained
    from slurm_acme.slurm import Slurm
    from slurm_acme.store import evaluate as store_eval
    from slurm_acme.store import open_store

    tok = CharTokenizer(sorted(set(string.printable)))
    ckpt = save_pretrained(TinyGPT(TinyGPTConfig(vocab_size=tok.vocab_size)), tok, tmp_path / "ckpt")
    config = tmp_path / "acme.toml"
    config.write_text(f'[evaluate]\nwork_dir = "{tmp_path / "work"}"\nlocal_dir = "/dev/shm/acme-seval-cancel"\n'
                      'gpus_per_node = 2\ntime_limit = "00:05:00"\n')
    db = f"sqlite:///{tmp_path / 'acme.db'}"
    bindir = Path(sys.executable).parent
    env = {**slurm_cluster.env, "PATH": f"{bindir}:{os.environ['PATH']}"}
    seval = [str(bindir / "seval"), "--config", str(config), "--db", db]
    out = subprocess.run([*seval, str(ckpt), "--datasets", "tiny", "--nodes", "1", "--json"],
                         env=env, capture_output=True, text=True, timeout=120, check=True)
    submitted = json.loads(out.stdout)
    done = subprocess.run([*seval, "cancel", submitted["eval_id"]], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    ids = set(submitted["job_ids"].values())
    slurm = Slurm(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        live = [j for j in slurm.squeue(ids) if not j.state.is_terminal()]
        if not live:
            break
        time.sleep(1)
    assert not live, f"still queued after cancel: {[(j.job_id, j.state.value) for j in live]}"
    run = store_eval.get_run(open_store(db), submitted["eval_id"])
    assert run.state == "CANCELLED"
    assert "1 cleanup job(s)" in done.stderr
    local = Path("/dev/shm/acme-seval-cancel") / submitted["eval_id"]
    deadline = time.monotonic() + 60
    while local.exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert not local.exists()
