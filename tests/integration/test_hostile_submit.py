"""A hostile ``train.yaml`` name on the real local cluster runs nothing it should not.

A name with a newline is refused before Slurm is asked anything; a name full of
shell metacharacters is submitted, runs, and stays data: none of the commands
hidden in it ran (their marker files are absent) and Slurm shows the name as
given. A submit Slurm itself refuses leaves no folder and no run behind.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from test_ft_support import fresh_dir, sacme, submit, wait_run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _spec(folder: Path, name: str, **extra: object) -> Path:
    spec = {"name": name, "nodes": 1, "command": [sys.executable, "-c", "print('trained')"],
            "checkpoint": {"dir": "ckpt"}, "time": "00:05:00",
            "fault_tolerance": {"health_check": "none", "max_restarts": 0}, **extra}
    path = folder / "train.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _markers(tag: str, n: int) -> list[Path]:
    return [Path(f"/tmp/acme-sec-pwned-{tag}-{i}") for i in range(n)]


def test_a_newline_in_the_name_is_refused_and_nothing_reaches_slurm(slurm_cluster, slurm):
    folder, url = fresh_dir("sec-newline")
    tag = uuid.uuid4().hex[:10]
    marker = _markers(tag, 1)[0]
    spec = _spec(folder, f"x\ntouch {marker} #")
    before = {j.job_id for j in slurm.squeue()}
    proc = sacme(url, "submit", str(spec), check=False, cwd=folder)
    assert proc.returncode == 2 and "field 'name'" in proc.stderr and "control character" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert {j.job_id for j in slurm.squeue()} - before == set()  # no new job (an earlier test's may end meanwhile)
    assert not marker.exists()
    assert sorted(p.name for p in folder.iterdir()) == ["train.yaml"]


def test_shell_metacharacters_in_the_name_stay_data_on_a_real_run(slurm_cluster, slurm):
    folder, url = fresh_dir("sec-metachar")
    tag = uuid.uuid4().hex[:10]
    m = _markers(tag, 4)
    name = f"a'; touch {m[0]}; echo '$(touch {m[1]})`touch {m[2]}`\" ; touch {m[3]} #"
    run_id, job_id = submit(url, _spec(folder, name))
    view = wait_run(url, run_id, job_id, slurm)
    assert view["state"] == "COMPLETED", json.dumps(view)[-2000:]
    for marker in m:
        assert not marker.exists(), marker
    assert slurm.show_job(job_id).name == name  # passed to Slurm as one argv element
    log = folder / "acme-runs" / run_id / f"slurm-{job_id}.out"
    assert "trained" in log.read_text() or any("trained" in p.read_text(errors="replace")
                                               for p in (folder / "acme-runs" / run_id).glob("*.log"))


def test_a_submit_slurm_refuses_leaves_no_folder_and_no_run(slurm_cluster, slurm):
    folder, url = fresh_dir("sec-refused")
    spec = _spec(folder, "refused", partition=f"nope{uuid.uuid4().hex[:6]}")
    proc = sacme(url, "submit", str(spec), check=False, cwd=folder)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "partition" in proc.stderr.lower()
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith("acme.db")) == ["train.yaml"]
    status = sacme(url, "status", check=False)
    assert status.returncode == 2 and "no runs" in status.stderr
