"""Entry points ``sacme`` and ``seval``.

Subcommands live in their own modules and are imported only when invoked, so
``sacme --help`` stays fast and a command's heavy imports (SQLAlchemy,
pydantic, rich, torch) never slow another. The group's help lists each
command's one-line summary from :data:`SACME_COMMANDS` instead of importing
every command to ask it (a test keeps the two in step). One handler turns
:class:`AcmeError` into one line on stderr and its exit code.
"""

from __future__ import annotations

import importlib
import sys
from typing import NamedTuple

import click

from slurm_acme import __version__, exitcodes
from slurm_acme.cli.context import AppContext, common_options
from slurm_acme.errors import AcmeError


class LazyCommand(NamedTuple):
    """Where a subcommand lives (``module:attribute``) and its one-line summary."""

    target: str
    summary: str


#: command name -> where its click command lives and the first line of its help.
SACME_COMMANDS: dict[str, LazyCommand] = {
    "ingest": LazyCommand("slurm_acme.cli.ingest:ingest",
                          "Pull finished jobs from Slurm accounting (sacct) into the store."),
    "import-trace": LazyCommand("slurm_acme.cli.import_trace:import_trace",
                                "Import AcmeTrace CSV files (streaming, idempotent, timezones to UTC)."),
    "report": LazyCommand("slurm_acme.cli.report:report",
                          "Characterise a cluster's jobs, utilisation, power and failures (paper s3-s5)."),
    "collectd": LazyCommand("slurm_acme.cli.collectd:collectd",
                            "Run this node's telemetry collector (samples -> spool -> store)."),
    "diagnose": LazyCommand("slurm_acme.cli.diagnose:diagnose",
                            "Diagnose failed runs from their logs: category, origin, action, culprit node."),
    "rules": LazyCommand("slurm_acme.cli.diagnose:rules", "Inspect and test the failure rule book."),
    "healthcheck": LazyCommand("slurm_acme.cli.healthcheck:healthcheck",
                               "Find faulty nodes: pair tests in round 1, suspects re-paired in round 2."),
    "submit": LazyCommand("slurm_acme.cli.submit:submit", "Submit TRAIN_YAML as a self-healing pretraining job."),
    "supervise": LazyCommand("slurm_acme.cli.submit:supervise",
                             "Supervise one attempt of RUN_ID (the batch script execs this; not for people)."),
    "status": LazyCommand("slurm_acme.cli.submit:status",
                          "Show a run's attempts: nodes, endings, diagnoses, exclusions, checkpoints, goodput."),
    "logs": LazyCommand("slurm_acme.cli.submit:logs", "Print RUN's compressed logs, attempt by attempt."),
    "db": LazyCommand("slurm_acme.cli.db:db", "Store administration."),
    "admin": LazyCommand("slurm_acme.cli.admin:admin",
                         "Put slurm-acme on a node (hooks, collector, unit, config) and check it."),
    "nodes": LazyCommand("slurm_acme.cli.nodes:nodes",
                         "Each node's health history and Slurm state; drain (reconcile) and resume."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use.

    A command whose module fails to import is a bug, not an unknown command:
    the ``ImportError`` propagates with its traceback.
    """

    def __init__(self, *args, lazy: dict[str, LazyCommand], **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module_name, attr = self.lazy[name].target.split(":")
            command: click.Command = getattr(importlib.import_module(module_name), attr)
            return command
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the summaries, importing no command module."""
        names = [n for n in self.list_commands(ctx) if n in self.lazy or self.commands.get(n) is not None]
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            if name in self.lazy:
                summary = click.Command(name, help=self.lazy[name].summary).get_short_help_str(limit)
            else:
                command = self.commands[name]
                if command.hidden:
                    continue
                summary = command.get_short_help_str(limit)
            rows.append((name, summary))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, lazy=SACME_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@common_options
@click.version_option(__version__, prog_name="sacme")
@click.pass_context
def sacme(ctx: click.Context, config_path: str | None, db_url: str | None) -> None:
    """slurm-acme: telemetry, reports, fault-tolerant training and evaluation on Slurm."""
    ctx.obj = AppContext(config_path=config_path, db_url=db_url)


def run_cli(command: click.Command, prog_name: str, argv: list[str] | None = None) -> int:
    """Run a click command with the project's error contract; return the exit code."""
    try:
        command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except AcmeError as exc:
        click.echo(f"{prog_name}: error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo(f"{prog_name}: aborted", err=True)
        return 130
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code if exc.exit_code else exitcodes.USAGE
    except BrokenPipeError:
        return exitcodes.OK
    return exitcodes.OK


def sacme_main() -> None:
    sys.exit(run_cli(sacme, "sacme"))


def seval_main() -> None:
    from slurm_acme.cli.seval import seval

    sys.exit(run_cli(seval, "seval"))
