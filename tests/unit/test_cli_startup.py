"""``sacme``'s front door: lazy subcommands, what start-up imports, import bugs shown as bugs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import click
import pytest
from click.testing import CliRunner

from slurm_acme.cli.main import SACME_COMMANDS, LazyCommand, LazyGroup, sacme
from slurm_acme.store import open_store

#: Libraries no command may pay for before it uses them.
HEAVY = ("sqlalchemy", "pydantic", "rich", "torch", "numpy", "yaml", "matplotlib", "psycopg")


def modules_after(argv: list[str], tmp_path) -> set[str]:  # type: ignore[no-untyped-def]
    """The modules a fresh interpreter holds after running ``sacme ARGV``."""
    probe = textwrap.dedent(f"""
        import json, sys
        from slurm_acme.cli.main import run_cli, sacme
        code = run_cli(sacme, "sacme", {argv!r})
        print(json.dumps({{"code": code, "modules": sorted(sys.modules)}}))
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["code"] == 0, done.stderr
    return set(out["modules"])


def test_each_summary_is_its_commands_own_first_help_line():
    ctx = click.Context(sacme)
    for name, lazy in SACME_COMMANDS.items():
        command = sacme.get_command(ctx, name)
        assert command is not None
        assert command.get_short_help_str(limit=10**6) == lazy.summary, name


def test_help_lists_every_command_with_its_summary():
    result = CliRunner().invoke(sacme, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    for name, lazy in SACME_COMMANDS.items():
        assert f"{name}  " in result.output
        assert lazy.summary in result.output


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["diagnose", "--help"], ["status", "--help"]])
def test_start_up_imports_no_heavy_library(argv, tmp_path):
    loaded = modules_after(argv, tmp_path)
    assert sorted(m for m in loaded if m.split(".")[0] in HEAVY) == []


def test_help_imports_no_command_module(tmp_path):
    loaded = modules_after(["--help"], tmp_path)
    commands = {lazy.target.split(":")[0] for lazy in SACME_COMMANDS.values()}
    assert sorted(loaded & commands) == []


def test_a_broken_import_inside_a_command_is_a_bug_not_an_unknown_command(tmp_path, monkeypatch):
    (tmp_path / "acme_probe_cmd.py").write_text(
        "import click\nimport slurm_acme.no_such_module  # noqa: F401\n\n"
        "@click.command()\ndef probe():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    group = LazyGroup(name="g", lazy={"probe": LazyCommand("acme_probe_cmd:probe", "Probe.")})
    result = CliRunner().invoke(group, ["probe"])
    assert isinstance(result.exception, ModuleNotFoundError)
    assert result.exception.name == "slurm_acme.no_such_module"
    assert "No such command" not in result.output


def test_an_unknown_command_is_still_a_usage_error():
    result = CliRunner().invoke(sacme, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command 'no-such-command'" in result.output


def diagnosis_modules(tmp_path) -> set[str]:  # type: ignore[no-untyped-def]
    """The modules `sacme diagnose` loads on a one-line log a rule answers, into an existing store."""
    log = tmp_path / "one.log"
    log.write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    url = f"sqlite:///{tmp_path / 'acme.db'}"
    open_store(url).dispose()  # an existing store: creating one runs the migrations
    return modules_after(["--db", url, "diagnose", str(log)], tmp_path)


def test_a_diagnosis_a_rule_answers_builds_no_case_index(tmp_path):
    loaded = diagnosis_modules(tmp_path)
    unused = ("numpy", "rich", "http.client", "sqlalchemy.dialects.postgresql", "slurm_acme.diagnose.retrieval")
    assert sorted(m for m in unused if m in loaded) == []


def test_a_diagnosis_into_a_current_store_imports_no_sqlalchemy(tmp_path):
    """Recording a diagnosis is plain SQL and the config is read without pydantic:
    the command pays for neither."""
    loaded = diagnosis_modules(tmp_path)
    assert "slurm_acme.store.failures" in loaded  # the probe sees the store's modules at all
    assert sorted(m for m in loaded if m.split(".")[0] in ("sqlalchemy", "pydantic")) == []
    assert sorted(m for m in loaded if m.startswith("slurm_acme.store.schema.")) == []


def test_a_culprit_diagnosis_records_its_ledger_event_without_sqlalchemy(tmp_path):
    """An infrastructure failure naming its node also writes the node's ledger event,
    in the same plain-SQL transaction."""
    from slurm_acme.store import nodes as ledger

    log = tmp_path / "nccl.log"
    log.write_text("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, "
                   "unhandled system error\n"
                   "srun: error: node3: task 5: Exited with exit code 1\n"
                   "srun: error: node1: tasks 0-3: Killed\n")
    url = f"sqlite:///{tmp_path / 'acme.db'}"
    open_store(url).dispose()
    loaded = modules_after(["--db", url, "diagnose", "--json", str(log)], tmp_path)
    assert sorted(m for m in loaded if m.split(".")[0] == "sqlalchemy") == []
    store = open_store(url)
    try:
        from slurm_acme.store import failures as failure_store

        [stored] = failure_store.list_failures(store)
        events = ledger.list_events(store)
    finally:
        store.dispose()
    assert stored.origin == "infrastructure" and stored.node
    assert [(e.node, e.failure_id, e.source) for e in events] == [(stored.node, stored.id, "diagnosis")]


def test_status_json_imports_no_renderer_or_numpy(tmp_path):
    from slurm_acme.store import runs as run_store

    url = f"sqlite:///{tmp_path / 'acme.db'}"
    store = open_store(url)
    try:
        run_store.create_run(store, run_id="r1", name="n", cluster="c", user=None, spec="{}",
                             workdir=str(tmp_path), created_ts=1.0, job_id="7", state="COMPLETED")
    finally:
        store.dispose()
    loaded = modules_after(["--db", url, "status", "r1", "--json"], tmp_path)
    assert sorted(m for m in ("numpy", "rich") if m in loaded) == []
    assert sorted(m for m in loaded if m.split(".")[0] == "sqlalchemy") == []  # plain SQL reads
    assert "slurm_acme.ft.stored_spec" in loaded  # the spec is read from its stored JSON ...
    assert sorted(m for m in loaded if m.split(".")[0] in ("yaml", "pydantic")) == []  # ... not parsed again


def test_a_first_trace_import_loads_no_sqlalchemy_and_no_progress_bar_off_a_terminal(tmp_path):
    """The columnar import writes jobs and rollups in plain SQL; rich draws only on a terminal."""
    pytest.importorskip("pyarrow")
    from slurm_acme.report.synthetic import write_trace

    trace = tmp_path / "seren.csv"
    write_trace(trace, 500, months=2, seed=3)
    url = f"sqlite:///{tmp_path / 'acme.db'}"
    open_store(url).dispose()
    loaded = modules_after(["--db", url, "import-trace", str(trace), "--cluster", "seren"], tmp_path)
    assert "slurm_acme.store.column_rollups" in loaded  # the bulk path ran, with its rollups
    assert sorted(m for m in loaded if m.split(".")[0] in ("sqlalchemy", "rich")) == []
    store = open_store(url)
    try:
        with store.reading() as db:
            assert db.scalar("SELECT count(*) FROM jobs WHERE cluster = 'seren'") == 500
            assert db.scalar("SELECT count(*) FROM report_rollup_parts WHERE cluster = 'seren'") >= 2
    finally:
        store.dispose()
