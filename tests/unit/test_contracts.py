"""Names that cross processes, round-tripped from each writer through its reader."""

from __future__ import annotations

import subprocess
import time

import pytest
from click.testing import CliRunner

from slurm_acme import contracts as c
from slurm_acme.ckpt.metrics import MetricsWriter
from slurm_acme.ckpt.skips import skip_steps_from_env
from slurm_acme.ft.launch import training_env
from slurm_acme.ft.metrics import MetricsTail, useful_seconds
from slurm_acme.ft.plan import build_plan
from slurm_acme.ft.spec import parse_spec
from slurm_acme.ft.status import metric_files
from slurm_acme.ft.supervisor import JobContext
from slurm_acme.store import open_store
from slurm_acme.store import runs as rs

SPEC = parse_spec("""\
name: contracts
nodes: 2
command: [python, train.py]
checkpoint: {dir: ckpt, interval: 7, keep: 2}
""", "t.yaml")


def _env(tmp_path, **kw):  # type: ignore[no-untyped-def]
    args = dict(base={}, ckpt_dir=str(tmp_path / "ckpt"), resume_from=None, skip_steps="7-9",
                metrics_file=str(tmp_path / "m.jsonl"), master_addr="10.0.0.1", port=29500,
                run_id="r1", attempt=2)
    args.update(kw)
    return training_env(SPEC, **args)


def test_training_env_names_only_contract_variables() -> None:
    env = training_env(SPEC, base={"PATH": "/bin"}, ckpt_dir="/c", resume_from="/c/step_5",
                       skip_steps="", metrics_file="/m", master_addr="a", port=1, run_id="r",
                       attempt=0)
    acme = {k for k in env if k.startswith("ACME_") or k.startswith("MASTER_")}
    assert acme <= set(c.TRAINING_ENV)
    assert env[c.ENV_RESUME_FROM] == "/c/step_5"


def test_training_env_reaches_the_trainers_readers(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    env = _env(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert str(skip_steps_from_env()) == "7-9"
    writer = MetricsWriter.from_env(rank=0)
    writer.write(c.MetricEvent.STEP, 3, 1.5)
    writer.close()
    tail = MetricsTail(tmp_path / "m.jsonl")
    assert tail.poll() == 1 and tail.last_step == 3


def test_every_metric_event_the_writer_sends_is_read_by_the_heartbeat(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "m.jsonl"
    writer = MetricsWriter(path, rank=0)
    writer.write(c.MetricEvent.RESUME, 10)
    writer.write(c.MetricEvent.STEP, 11, 2.0)
    writer.write(c.MetricEvent.CHECKPOINT, 11)
    writer.write(c.MetricEvent.SPIKE, 12, 99.0)
    writer.write(c.MetricEvent.REQUEUE, 12, checkpointed=True)
    writer.write(c.MetricEvent.DONE, 12)
    writer.close()
    tail = MetricsTail(path)
    assert tail.poll() == 6
    assert (tail.last_step, tail.checkpoints, tail.spike_step) == (11, [11], 12)
    assert tail.checkpointed_for_requeue and tail.done
    useful, last = useful_seconds([path])
    assert last == 11 and useful >= 0


def test_an_unknown_event_is_ignored_not_counted_as_a_step() -> None:
    assert c.metric_event("something-new") is None
    assert c.metric_event(None) is c.MetricEvent.STEP


def test_attempt_files_the_supervisor_writes_are_the_ones_status_reads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}")
    rs.create_run(store, run_id="r1", name="n", cluster="c", user="u", spec=SPEC.to_json(),
                  workdir=str(tmp_path), created_ts=time.time(), job_id="42")
    rs.start_attempt(store, run_id="r1", attempt=1, job_id="42", nodelist="n1", start_ts=1.0)
    run = rs.get_run(store, "r1")
    from slurm_acme.contracts import run_dir_for

    ctx = JobContext(run_id="r1", job_id="42", attempt=1, nodelist="", cluster="c",
                     run_dir=run_dir_for(str(tmp_path), "r1"), workdir=str(tmp_path))
    assert metric_files(run, rs.list_attempts(store, "r1")) == [ctx.path(c.AttemptFile.METRICS)]


def test_sacme_logs_finds_the_compressed_log_the_supervisor_wrote(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from slurm_acme.cli.main import sacme
    from slurm_acme.contracts import run_dir_for

    url = f"sqlite:///{tmp_path / 'a.db'}"
    store = open_store(url)
    rs.create_run(store, run_id="r1", name="n", cluster="c", user="u", spec=SPEC.to_json(),
                  workdir=str(tmp_path), created_ts=time.time(), job_id="42")
    rs.start_attempt(store, run_id="r1", attempt=0, job_id="42", nodelist="n1", start_ts=1.0)
    ctx = JobContext(run_id="r1", job_id="42", attempt=0, nodelist="", cluster="c",
                     run_dir=run_dir_for(str(tmp_path), "r1"), workdir=str(tmp_path))
    ctx.path(c.AttemptFile.COMPRESSED_LOG).parent.mkdir(parents=True)
    ctx.path(c.AttemptFile.COMPRESSED_LOG).write_text("NCCL error: the compressed line\n")
    ctx.path(c.AttemptFile.LOG).write_text("0: the raw line\n")
    result = CliRunner().invoke(sacme, ["--db", url, "logs", "r1"])
    assert result.exit_code == 0 and "NCCL error: the compressed line" in result.output
    result = CliRunner().invoke(sacme, ["--db", url, "logs", "r1", "--raw"])
    assert "0: the raw line" in result.output


@pytest.mark.parametrize("name", ["run dir", "a'b"])
def test_batch_script_exports_what_the_supervisor_reads(tmp_path, name) -> None:  # type: ignore[no-untyped-def]
    plan = build_plan(SPEC, spec_path="t.yaml", db_url="sqlite:////tmp/x y.db", run_id="r1",
                      python="/usr/bin/python3", cwd=str(tmp_path / name),
                      config_path="/etc/a b.toml")
    exports = "\n".join(line for line in plan.script.splitlines() if line.startswith("export "))
    out = subprocess.run(["bash", "-c", exports + "\nenv -0"], capture_output=True, text=True,
                         check=True).stdout
    env = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    assert env[c.ENV_RUN_DIR] == plan.run_dir
    assert env[c.ENV_RUN_ID] == "r1"
    assert env[c.ENV_DB] == "sqlite:////tmp/x y.db"
    assert env[c.ENV_CONF] == "/etc/a b.toml"


@pytest.mark.parametrize("extra", [
    "",
    "fault_tolerance:\n  spares: 2\n",
    "checkpoint:\n  dir: ~/ckpt/run\n  glob: ['step_*', '*.safetensors']\n",
    "checkpoint:\n  dir: out\n  glob: []\n",
])
def test_the_stored_spec_status_reads_is_the_spec_submit_stored(extra) -> None:
    """``sacme submit`` stores ``TrainSpec.to_json``; ``sacme status`` reads it back
    without pydantic and must see the same nodes and checkpoints."""
    from slurm_acme.ft.stored_spec import read_stored_spec

    text = "name: t\nnodes: 3\ncommand: [python, train.py]\n" + (
        extra if "checkpoint:" in extra else "checkpoint:\n  dir: ckpt\n" + extra)
    spec = parse_spec(text, "t.yaml")
    stored = read_stored_spec(spec.to_json())
    assert stored is not None
    assert (stored.nodes, stored.allocated_nodes) == (spec.nodes, spec.allocated_nodes)
    assert (stored.checkpoint_dir, list(stored.checkpoint_globs)) == (spec.checkpoint.dir, spec.checkpoint.glob)


@pytest.mark.parametrize("text", ["{}", "not json", "[]", '{"nodes": 0, "checkpoint": {"dir": "c", "glob": []}}',
                                  '{"nodes": 2, "checkpoint": {"dir": 5, "glob": []}}'])
def test_a_row_that_is_not_a_stored_spec_reads_as_none(text) -> None:
    from slurm_acme.ft.stored_spec import read_stored_spec

    assert read_stored_spec(text) is None
