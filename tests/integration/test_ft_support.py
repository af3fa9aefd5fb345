"""Helpers shared by the ``test_ft_*`` end-to-end scenarios (no tests here).

Each scenario writes a train.yaml for ``examples/train_tiny_gpt.py`` with an
injected fault, submits it with the real ``sacme`` CLI to the local cluster,
waits for the run to finish in the store, and reads ``sacme status --json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "examples" / "train_tiny_gpt.py"
#: A tiny model: a step takes tens of milliseconds per rank on a shared 2-core machine.
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--batch-size", "4",
        "--seq-len", "32"]


def write_spec(folder: Path, name: str, *, faults: str = "", steps: int = 30, interval: int = 5,
               nodes: int = 2, extra_args: list[str] | None = None, **ft: object) -> Path:
    ft_section = {"max_restarts": 2, "hang_timeout": 60, "health_check": "none",
                  "health_timeout": 30, **ft}
    spec = {
        "name": name, "nodes": nodes,
        "command": [sys.executable, str(TRAINER), "--steps", str(steps),
                    "--ckpt-interval", str(interval), *TINY, *(extra_args or [])],
        "env": {"ACME_FAULTS": faults} if faults else {},
        "checkpoint": {"dir": "ckpt", "interval": interval, "keep": 3},
        "fault_tolerance": ft_section,
        "time": "00:10:00",
    }
    path = folder / "train.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def sacme(db_url: str, *args: str, check: bool = True, cwd: Path | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", db_url, *args],
                          capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ}, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"sacme {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def submit(db_url: str, spec: Path) -> tuple[str, str]:
    out = sacme(db_url, "submit", str(spec), "--json", cwd=spec.parent).stdout
    data = json.loads(out)
    return data["run_id"], data["job_id"]


def status(db_url: str, run_id: str) -> dict:
    return json.loads(sacme(db_url, "status", run_id, "--json").stdout)


def wait_run(db_url: str, run_id: str, job_id: str, slurm, *, timeout: float = 240) -> dict:  # type: ignore[no-untyped-def]
    """Poll until the run is COMPLETED or STOPPED and its job has left the queue.

    On any failure the job is cancelled, so a failed test leaves nothing running.
    """
    deadline = time.monotonic() + timeout
    view: dict = {}
    finished = False
    try:
        while time.monotonic() < deadline:
            view = status(db_url, run_id)
            if view["state"] in ("COMPLETED", "STOPPED") and slurm.show_job(job_id).state.is_terminal():
                finished = True
                return view
            time.sleep(2)
        raise AssertionError(f"run {run_id} (job {job_id}) did not finish in {timeout:.0f}s: "
                             f"{json.dumps(view, indent=1)[-3000:]}")
    finally:
        if not finished:
            slurm.scancel([job_id])


def metrics(spec_dir: Path, run_id: str, attempt: int, job_id: str) -> list[dict]:
    path = spec_dir / "acme-runs" / run_id / f"attempt-{attempt}-{job_id}.metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fresh_dir(name: str) -> tuple[Path, str]:
    """A work folder and SQLite URL for one scenario, outside pytest's basetemp.

    Every engineer's pytest shares ``/tmp/pytest-of-root`` and prunes all but
    the newest few folders there, which could delete a minutes-long scenario's
    checkpoints mid-run; the job also needs a path that outlives the test.
    """
    import tempfile

    root = Path(os.environ.get("ACME_FT_TEST_DIR", "/tmp/acme-ft-tests"))
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    return folder, f"sqlite:///{folder / 'acme.db'}"
