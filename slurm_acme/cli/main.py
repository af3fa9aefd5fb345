"""Entry points ``sacme`` and ``seval``.

Subcommands live in their own modules and are imported only when invoked, so
``sacme --help`` stays fast and a command's heavy imports (torch, matplotlib)
never slow another. One handler turns :class:`AcmeError` into one line on
stderr and its exit code.
"""

from __future__ import annotations

import importlib
import sys

import click

from slurm_acme import __version__, exitcodes
from slurm_acme.cli.context import AppContext, common_options
from slurm_acme.errors import AcmeError

#: command name -> "module:attribute" of a click command.
SACME_COMMANDS: dict[str, str] = {
    "ingest": "slurm_acme.cli.ingest:ingest",
    "import-trace": "slurm_acme.cli.import_trace:import_trace",
    "report": "slurm_acme.cli.report:report",
    "collectd": "slurm_acme.cli.collectd:collectd",
    "diagnose": "slurm_acme.cli.diagnose:diagnose",
    "rules": "slurm_acme.cli.diagnose:rules",
    "healthcheck": "slurm_acme.cli.healthcheck:healthcheck",
    "submit": "slurm_acme.cli.submit:submit",
    "supervise": "slurm_acme.cli.submit:supervise",
    "status": "slurm_acme.cli.submit:status",
    "logs": "slurm_acme.cli.submit:logs",
    "db": "slurm_acme.cli.db:db",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args, lazy: dict[str, str], **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module_name, attr = self.lazy[name].split(":")
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name and exc.name.startswith("slurm_acme"):
                    return None  # command not built yet
                raise
            return getattr(module, attr)
        return super().get_command(ctx, name)


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
