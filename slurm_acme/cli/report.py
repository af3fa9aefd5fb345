"""``sacme report``: the paper's characterisation of a cluster, from the store."""

from __future__ import annotations

import shutil
import sys

import click

from slurm_acme.cli.context import AppContext, pass_app
from slurm_acme.report.render import DEFAULT_WIDTH, FORMATS


@click.command("report")
@click.option("--month", help="Calendar month YYYY-MM (UTC); jobs count by submit time.")
@click.option("--since", help="Start (inclusive), ISO date or date-time; naive means UTC.")
@click.option("--until", help="End (exclusive), ISO date or date-time; naive means UTC.")
@click.option("--cluster", help="Only this cluster (default: every cluster in the store).")
@click.option("--user", help="Only this user's jobs (others' need the admin group).")
@click.option("--type", "wtype", help="Only this workload type: Eval, Pretrain, SFT, MLLM, Debug, Other.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("--out", metavar="FILE", help="Write the report here instead of stdout.")
@click.option("--plots", metavar="DIR", help="Also write one PNG per figure here.")
@click.option("--compare", is_flag=True, help="Add Seren, Kalos, Philly, Helios and PAI beside this cluster.")
@pass_app
def report(app: AppContext, month: str | None, since: str | None, until: str | None,
           cluster: str | None, user: str | None, wtype: str | None, fmt: str,
           out: str | None, plots: str | None, compare: bool) -> None:
    """Characterise a cluster's jobs, utilisation, power and failures (paper s3-s5).

    \b
    Sections: findings (this site beside Acme, first), overview, trends
    (month by month, when the period spans months), workload, durations,
    scale, states, utilisation, power, failures, compare (--format json has
    exactly these keys).
    Jobs count in the period their submit time (UTC) falls in; GPU-job
    figures use jobs with gpus > 0; TIMEOUT, NODE_FAIL, OUT_OF_MEMORY,
    BOOT_FAIL and DEADLINE count as failed. Percentiles are nearest rank:
    the ceil(p*n/100)-th smallest value. Shares are fractions 0..1.
    Users outside report.admin_group (system acme.toml only) see only their own jobs.

    Exit 0 (also for an empty period, which the report says), 2 for a bad
    month, an unknown cluster or type, or an unwritable --out.
    """
    from slurm_acme.access import current_viewer, visible_user
    from slurm_acme.report import output, render
    from slurm_acme.report.compute import build_report, canonical_type, check_cluster
    from slurm_acme.report.period import resolve_period
    from slurm_acme.store.report import JobFilter

    period = resolve_period(month, since, until)
    wtype = canonical_type(wtype) if wtype is not None else None
    out_path = output.check_out_file(out) if out else None
    plots_dir = output.check_plots_dir(plots) if plots else None
    config = app.config.report
    user = visible_user(current_viewer(), user)  # admin group: system config only
    store = app.store(readonly=True)
    if cluster is not None:
        check_cluster(store, cluster)
    flt = JobFilter(period.since_ts, period.until_ts, cluster, user, wtype)
    if sys.stderr.isatty():
        click.echo(f"sacme: computing report for {period.label} ...", err=True)
    result = build_report(store, flt, period, tdp_watts=config.tdp_watts, compare=compare)

    width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    rendered = render.render(result, fmt, plots=plots_dir is not None, width=width)
    text = rendered.text
    if plots_dir is not None:
        for path in output.write_plots(plots_dir, rendered.pngs):
            click.echo(f"sacme: wrote {path}", err=True)
    if out_path is not None:
        output.write_text(out_path, text)
        click.echo(f"sacme: wrote {out_path}", err=True)
    else:
        click.echo(text, nl=False)
