"""Fakes at the supervisor's boundaries (Slurm, health check, requeue helper, signals).

The training command really runs: a small Python program writes what srun's
tasks would print (and, when a test wants it, metric events).
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from slurm_acme.contracts import run_dir_for
from slurm_acme.ft.checkpoints import find_checkpoints
from slurm_acme.ft.spec import parse_spec
from slurm_acme.ft.supervisor import JobContext, Signals, Supervisor
from slurm_acme.health.records import HealthReport
from slurm_acme.slurm import JobState, NodeInfo, ScontrolJob
from slurm_acme.store import open_store
from slurm_acme.store import runs as rs


class QuietSignals(Signals):
    def install(self) -> None:  # the test process keeps its own handlers
        pass


@dataclass
class FakeSlurm:
    timeout: float = 5.0
    job_state: str = "RUNNING"
    down: tuple[str, ...] = ()
    #: ``sacctmgr -n -P list event`` output (the real parser reads it)
    events: str = ""

    def show_hostnames(self, hostlist: str) -> list[str]:
        return hostlist.split(",")

    def sinfo_nodes(self) -> list[NodeInfo]:
        return [NodeInfo(f"node{i}", "down*" if f"node{i}" in self.down else "idle")
                for i in range(1, 5)]

    def node_events(self, nodes, since) -> list:  # type: ignore[no-untyped-def]
        from slurm_acme.slurm import parse

        return [e for e in parse.parse_sacctmgr_events(self.events)
                if e.node in nodes and e.start is not None and e.start >= since]

    def sacct(self, start, end=None, job_ids=None, all_users=True) -> list:  # type: ignore[no-untyped-def]
        return [SimpleNamespace(job_id=str(j), state=JobState.parse(self.job_state))
                for j in job_ids or []]

    def show_job(self, job_id: str) -> ScontrolJob:
        return ScontrolJob(fields={"JobId": job_id, "JobState": self.job_state})


@dataclass
class Spawns:
    calls: list[dict] = field(default_factory=list)

    def __call__(self, job_id: str, **kw: object) -> None:
        self.calls.append({"job_id": job_id, **kw})


def program(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "trainer.py"
    path.write_text("import json, os, sys, time\n"
                    "def metric(event, step):\n"
                    "    with open(os.environ['ACME_METRICS_FILE'], 'a') as f:\n"
                    "        f.write(json.dumps({'step': step, 'time': time.time(), 'event': event, 'rank': 0}) + '\\n')\n"
                    "with open('env.json', 'w') as f:\n"
                    "    json.dump({k: v for k, v in os.environ.items() if k.startswith(('ACME_', 'MASTER_'))}, f)\n"
                    + textwrap.dedent(body))
    return path


def make(tmp_path: Path, body: str, *, attempt: int = 0, ft: str = "", checkpoints=None,  # type: ignore[no-untyped-def]
         extra: str = "", slurm: FakeSlurm | None = None):
    """A supervisor of a real command (``body``), with fake Slurm, health check and helper.

    ``checkpoints=None`` finds them on disk for real (``ckpt/`` under ``tmp_path``).
    """
    store = open_store(f"sqlite:///{tmp_path / 'acme.db'}")
    trainer = program(tmp_path, body)
    spec = parse_spec(f"""\
name: unit
nodes: 1
command: [{sys.executable}, {trainer}]
checkpoint: {{dir: ckpt, interval: 5}}
fault_tolerance: {{max_restarts: 2, health_check: none, hang_timeout: 2 {ft}}}
{extra}
""", "t.yaml")
    if rs.get_run(store, "r1") is None:
        rs.create_run(store, run_id="r1", name="unit", cluster="acme", user="u",
                      spec=spec.to_json(), workdir=str(tmp_path), created_ts=0.0, job_id="42")
    spawns = Spawns()
    sup = Supervisor(store=store, slurm=slurm or FakeSlurm(), spec=spec,  # type: ignore[arg-type]
                     ctx=JobContext(run_id="r1", job_id="42", attempt=attempt, nodelist="",
                                    cluster="acme", run_dir=run_dir_for(str(tmp_path), "r1"),
                                    workdir=str(tmp_path)),
                     health=lambda *a, **k: HealthReport((), (), rounds=0, tests=0),
                     checkpoints=find_checkpoints if checkpoints is None
                     else lambda d, globs: list(checkpoints),
                     spawn=spawns, signals=QuietSignals(), poll_s=0.1, requeue_wait_s=0,
                     log=lambda msg: None)
    return sup, store, spawns


