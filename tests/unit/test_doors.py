"""The two doors, guarded: SQL only in ``slurm_acme/store``, processes only where listed.

An AST scan of every module under ``slurm_acme/``. A failure names the module,
the line and what it did, so the fix is to move that code behind its door (or,
for a process, to add the module to :data:`PROCESS_ALLOWED` with the reason a
reviewer can judge).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "slurm_acme"

#: Top-level modules that speak SQL: the ORM/core and the drivers under it.
SQL_MODULES = frozenset({"sqlalchemy", "psycopg", "psycopg2", "sqlite3"})
#: The store's own handles on the database; outside ``store/`` nobody opens them.
SQL_HANDLES = frozenset({"engine", "raw_connection"})

#: Modules that start processes, and why each must.
PROCESS_ALLOWED: dict[str, str] = {
    "slurm_acme.slurm.runner": "the Slurm door: every Slurm command runs here, with a timeout",
    "slurm_acme.slurm.steps": "the Slurm door for srun steps that must stream (Popen, not run)",
    "slurm_acme.telemetry.sensors": "node sensor tools (ipmitool, dcgmi, perfquery) with a kill timeout",
    "slurm_acme.evaluate.sandbox": "runs model-generated code inside bubblewrap as an unprivileged uid",
    "slurm_acme.evaluate.backends.harness": "runs the evaluation harness (lm-eval, OpenCompass) a trial uses",
    "slurm_acme.evaluate.backends.catalogue": "asks the harness's own Python for its task list at plan time",
    "slurm_acme.evaluate.worker": "holds the trial steps it started through slurm.steps (Popen handles)",
    "slurm_acme.ft.supervisor": "launches the training command itself when there is no allocation (local run)",
    "slurm_acme.ft.watch": "watches and stops the training process the supervisor started",
    "slurm_acme.health.transport": "reads the pipes of the health-check srun step it started",
    "slurm_acme.admin.hookrun": "sacme admin check runs each installed hook once, timed, in its check mode",
    "slurm_acme.ft.requeue": "double-forks the requeue helper out of the job's process tree (os.fork/execv)",
}
#: What counts as starting a process: these modules, and these functions of ``os``/``pty``/``asyncio``.
PROCESS_MODULES = frozenset({"subprocess"})
PROCESS_FUNCTIONS = {
    "os": ("system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "exec", "spawn"),
    "pty": ("spawn", "fork"),
    "asyncio": ("create_subprocess_exec", "create_subprocess_shell"),
}
#: Slurm's commands: an argv list starting with one is built only in ``slurm_acme/slurm``.
SLURM_COMMANDS = frozenset({"sbatch", "srun", "salloc", "squeue", "sacct", "sacctmgr", "scontrol",
                            "scancel", "sinfo", "sstat", "sreport", "sprio", "sshare"})


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield module_name(path), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imported(tree: ast.AST) -> Iterator[tuple[int, str, str | None]]:
    """(line, top-level module, imported name or None) for every import, nested ones included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0], None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                yield node.lineno, node.module.split(".")[0], alias.name


def _is_process_function(module: str, name: str) -> bool:
    return any(name == f or name.startswith(f) for f in PROCESS_FUNCTIONS.get(module, ()))


def process_uses(tree: ast.AST) -> list[str]:
    """Every way ``tree`` starts a process, as ``line: what``."""
    found = [f"{line}: import {mod}" for line, mod, _ in imported(tree) if mod in PROCESS_MODULES]
    found += [f"{line}: from {mod} import {name}" for line, mod, name in imported(tree)
              if name and _is_process_function(mod, name)]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and _is_process_function(node.value.id, node.attr)):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


SOURCES = dict(modules())


def outside(package: str) -> dict[str, ast.Module]:
    return {name: tree for name, tree in SOURCES.items()
            if name != package and not name.startswith(package + ".")}


def test_the_scan_sees_the_package():
    assert "slurm_acme.store.engine" in SOURCES and "slurm_acme.cli.main" in SOURCES
    assert len(SOURCES) > 100


def test_sql_is_imported_only_inside_store():
    leaks = [f"{name}:{line}: {mod}" for name, tree in outside("slurm_acme.store").items()
             for line, mod, _ in imported(tree) if mod in SQL_MODULES]
    assert leaks == [], "SQL outside slurm_acme/store (move it into a store function):\n" + "\n".join(leaks)


def test_the_store_engine_is_opened_only_inside_store():
    leaks = [f"{name}:{node.lineno}: .{node.attr}" for name, tree in outside("slurm_acme.store").items()
             for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in SQL_HANDLES]
    assert leaks == [], "the store's engine used outside slurm_acme/store:\n" + "\n".join(leaks)


def test_processes_start_only_in_the_listed_modules():
    unlisted = [f"{name}:{use}" for name, tree in SOURCES.items() if name not in PROCESS_ALLOWED
                for use in process_uses(tree)]
    assert unlisted == [], ("a process started outside the allow-list (use slurm_acme.slurm for Slurm "
                            "commands, or list the module with its reason):\n" + "\n".join(unlisted))


@pytest.mark.parametrize("name", sorted(PROCESS_ALLOWED))
def test_every_allowed_module_still_needs_its_entry(name):
    """The list may only shrink: an entry whose module no longer starts a process goes."""
    assert name in SOURCES, f"{name} is allowed but does not exist"
    assert process_uses(SOURCES[name]), f"{name} no longer starts a process; remove it from PROCESS_ALLOWED"


def test_slurm_argv_is_built_only_in_the_slurm_package():
    built = [f"{name}:{node.lineno}: {ast.unparse(node)[:60]}"
             for name, tree in outside("slurm_acme.slurm").items() for node in ast.walk(tree)
             if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant)
             and node.elts[0].value in SLURM_COMMANDS]
    assert built == [], "a Slurm command line outside slurm_acme/slurm:\n" + "\n".join(built)


@pytest.mark.parametrize(("source", "expected"), [
    ("import subprocess\n", ["1: import subprocess"]),
    ("from subprocess import run\n", ["1: import subprocess"]),
    ("import os\nos.execv('/bin/x', [])\n", ["2: os.execv"]),
    ("from os import system\n", ["1: from os import system"]),
    ("def f():\n    import asyncio\n    return asyncio.create_subprocess_exec('x')\n",
     ["3: asyncio.create_subprocess_exec"]),
    ("import os\nos.path.join('a')\n", []),
])
def test_the_process_scan_catches_each_way_in(source, expected):
    assert process_uses(ast.parse(source)) == expected


def test_the_sql_scan_sees_nested_and_dotted_imports():
    tree = ast.parse("def f():\n    import sqlalchemy.orm\n    from psycopg import sql\n")
    assert [mod for _, mod, _ in imported(tree) if mod in SQL_MODULES] == ["sqlalchemy", "psycopg"]
