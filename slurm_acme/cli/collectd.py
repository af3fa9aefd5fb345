"""``sacme collectd``: the node collector, and the admin's spool commands."""

from __future__ import annotations

import json
import logging
import time

import click

from slurm_acme.cli.context import AppContext, pass_app
from slurm_acme.errors import InputError
from slurm_acme.telemetry.settings import CollectorSettings


def _console():  # type: ignore[no-untyped-def]
    """A rich console that does not squeeze tables into 80 columns when piped."""
    import sys

    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)


def _settings(app: AppContext, node: str | None, **overrides: object) -> CollectorSettings:
    return CollectorSettings.from_config(app.config, node=node, store_url=app.store_url,
                                         **overrides)


def _logging(logfile: str | None) -> None:
    handler: logging.Handler = (logging.FileHandler(logfile) if logfile
                                else logging.StreamHandler())
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger("acme")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


@click.group(invoke_without_command=True)
@click.option("--node", help="Slurm node name (default: $SLURMD_NODENAME, else the short hostname).")
@click.option("--interval", type=float, help="Seconds between samples (telemetry.interval_s).")
@click.option("--spool-dir", type=click.Path(file_okay=False),
              help="Node-local spool folder (telemetry.spool_dir).")
@click.option("--synthetic-gpus", type=click.IntRange(min=0),
              help="SYNTHETIC GPUs for an emulated cluster only (telemetry.synthetic_gpus).")
@click.option("--metrics-port", type=click.IntRange(0, 65535),
              help="Serve /metrics (dcgm-exporter names) on this port (telemetry.metrics_port; 0 = off).")
@click.option("--once", is_flag=True, help="Take one sample, flush, and exit.")
@click.option("--log-file", type=click.Path(dir_okay=False), help="Log here instead of stderr.")
@pass_app
@click.pass_context
def collectd(ctx: click.Context, app: AppContext, node: str | None, interval: float | None,
             spool_dir: str | None, synthetic_gpus: int | None, metrics_port: int | None, once: bool,
             log_file: str | None) -> None:
    """Run this node's telemetry collector (samples -> spool -> store).

    One runs per node; a second one exits at once. Hooks start it when it is
    not running; the systemd unit `sacme admin install` writes may too.
    """
    if ctx.invoked_subcommand is not None:
        ctx.obj = app
        ctx.meta["collectd.node"] = node
        ctx.meta["collectd.spool_dir"] = spool_dir
        return
    if interval is not None and interval <= 0:
        raise InputError(f"--interval must be positive (got {interval})")
    from slurm_acme.telemetry.daemon import run_collector

    _logging(log_file)
    settings = _settings(app, node, interval_s=interval, spool_dir=spool_dir,
                         synthetic_gpus=synthetic_gpus, metrics_port=metrics_port)
    ctx.exit(run_collector(settings, once=once))


def _nodes(settings: CollectorSettings, all_nodes: bool) -> list[str]:
    if not all_nodes:
        return [settings.node]
    if not settings.spool_dir.is_dir():
        raise InputError(f"spool folder {settings.spool_dir} does not exist")
    return sorted(p.name for p in settings.spool_dir.iterdir() if (p / "spool.db").exists())


@collectd.command()
@click.option("--all", "all_nodes", is_flag=True, help="Every node spool under the spool folder.")
@click.option("--json", "as_json", is_flag=True, help="Print counts as JSON.")
@click.pass_context
def flush(ctx: click.Context, all_nodes: bool, as_json: bool) -> None:
    """Copy what node spools hold into the store given by --db (idempotent backfill)."""
    from slurm_acme.store import open_store
    from slurm_acme.store import telemetry as tstore

    app: AppContext = ctx.obj
    base = _settings(app, ctx.meta["collectd.node"], spool_dir=ctx.meta["collectd.spool_dir"])
    target = app.store()
    out = {}
    for name in _nodes(base, all_nodes):
        node = _settings(app, name, spool_dir=ctx.meta["collectd.spool_dir"])
        spool = open_store(node.spool_url)
        try:
            result = tstore.copy_all(spool, target, batch=node.telemetry.flush_batch,
                                     min_coverage=node.telemetry.min_coverage)
        finally:
            spool.dispose()
        out[name] = {"gpu_rows": result.gpu_rows, "node_rows": result.node_rows,
                     "job_rows": result.job_rows}
    if as_json:
        click.echo(json.dumps(out))
    else:
        for name, counts in out.items():
            click.echo(f"{name}: {counts['node_rows']} node samples, {counts['gpu_rows']} GPU "
                       f"samples, {counts['job_rows']} job rows")


@collectd.command()
@click.option("--json", "as_json", is_flag=True, help="Print the summaries as JSON.")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True)
@click.argument("job_ids", nargs=-1)
@click.pass_context
def summaries(ctx: click.Context, as_json: bool, limit: int, job_ids: tuple[str, ...]) -> None:
    """Per-job telemetry summaries in the store (latest first)."""
    from slurm_acme.access import current_viewer, is_admin
    from slurm_acme.store import telemetry as tstore

    app: AppContext = ctx.obj
    viewer = current_viewer()
    rows = tstore.recent_summaries(app.store(readonly=True), limit, list(job_ids) or None,
                                   user=None if is_admin(viewer) else viewer.name)
    if as_json:
        click.echo(json.dumps(rows, default=str))
        return
    from rich.table import Table

    table = Table("job", "nodes", "gpus", "util mean/max %", "SM active mean", "GPU energy kJ",
                  "node energy kJ", "coverage", "flags")
    for r in rows:
        def num(v, fmt="{:.1f}"):  # type: ignore[no-untyped-def]
            return "-" if v is None else fmt.format(v)
        table.add_row(r["job_id"], r["nodes"] or "-", str(r["gpus"] or 0),
                      f"{num(r['gpu_util_mean'])}/{num(r['gpu_util_max'])}",
                      num(r["sm_active_mean"], "{:.2f}"),
                      num(None if r["gpu_energy_j"] is None else r["gpu_energy_j"] / 1000),
                      num(None if r["node_energy_j"] is None else r["node_energy_j"] / 1000),
                      num(r["coverage"], "{:.0%}"), r["flags"] or "")
    _console().print(table)


@collectd.command()
@click.option("--cluster", help="Cluster name (default: cluster.name from acme.toml).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.argument("job_id")
@click.pass_context
def job(ctx: click.Context, cluster: str | None, as_json: bool, job_id: str) -> None:
    """What the store holds for one job: its nodes, GPUs and samples."""
    from slurm_acme.store import telemetry as tstore

    app: AppContext = ctx.obj
    from slurm_acme.access import check_owner, current_viewer

    name = cluster or app.config.cluster.name
    rows = tstore.job_rows(app.store(readonly=True), name, job_id)
    if rows["job_nodes"]:
        check_owner(current_viewer(), rows["job_nodes"][0].get("user"), f"job {job_id}")
    if as_json:
        click.echo(json.dumps(rows, default=str))
        return
    if not rows["job_nodes"]:
        raise InputError(f"the store has no telemetry for job {job_id} on cluster {name!r}")
    from rich.table import Table

    table = Table("node", "GPU", "UUID", "samples", "util mean %", "power mean W", "source")
    per_gpu: dict[tuple[str, int], list[dict]] = {}
    for r in rows["gpu_samples"]:
        per_gpu.setdefault((r["node"], r["gpu_index"]), []).append(r)
    for (node, index), samples in sorted(per_gpu.items()):
        util = [r["util_percent"] for r in samples if r["util_percent"] is not None]
        power = [r["power_w"] for r in samples if r["power_w"] is not None]
        table.add_row(node, str(index), samples[0]["gpu_uuid"] or "-", str(len(samples)),
                      f"{sum(util) / len(util):.1f}" if util else "-",
                      f"{sum(power) / len(power):.0f}" if power else "-", samples[0]["source"])
    console = _console()
    for r in rows["job_nodes"]:
        cpu = [s["cpu_percent"] for s in rows["node_samples"]
               if s["node"] == r["node"] and s["cpu_percent"] is not None]
        console.print(f"{r['node']}: start {r['start_ts']}, end {r['end_ts']}, exit "
                      f"{r['exit_code']}, GPUs [{r['gpu_indices'] or ''}], {len(cpu)} node samples "
                      f"(CPU mean {sum(cpu) / len(cpu) if cpu else 0:.0f} %)")
    console.print(table)


@collectd.command()
@click.option("--dry-run", is_flag=True, help="Only say what would be deleted.")
@click.pass_context
def prune(ctx: click.Context, dry_run: bool) -> None:
    """Delete raw samples of the days before telemetry.raw_retention_days
    (whole day partitions on Postgres; rollups and summaries stay)."""
    from slurm_acme.store import telemetry as tstore

    app: AppContext = ctx.obj
    t = app.config.telemetry
    before = time.time() - t.raw_retention_days * 86400
    if dry_run:
        click.echo(f"would delete GPU and node samples of the days before {t.raw_retention_days:g} days "
                   f"ago (ts < {before:.0f}, rounded down to a UTC day)")
        return
    result = tstore.prune_raw(app.store(), before, batch=t.prune_batch)
    click.echo(f"deleted {result.rows} samples ({result.partitions} day partitions) before "
               f"{result.before_ts:.0f}; hourly rollups and job summaries kept")


@collectd.command("import")
@click.option("--since", help="Start (ISO date-time, UTC if naive); default: two hours ago.")
@click.option("--until", help="End (exclusive); default: now. The window is widened to whole hours.")
@click.option("--url", help="Prometheus base URL (default: telemetry.prometheus_url).")
@click.option("--step", type=float, default=None, help="Seconds between points (default: telemetry.interval_s).")
@click.option("--selector", default="", help='PromQL label selector added to every series, e.g. \'{cluster="a"}\'.')
@click.option("--json", "as_json", is_flag=True, help="Print what was imported as JSON.")
@click.pass_context
def import_(ctx: click.Context, since: str | None, until: str | None, url: str | None, step: float | None,
            selector: str, as_json: bool) -> None:
    """Rollups and per-job summaries from an existing Prometheus (dcgm-exporter).

    For sites with telemetry.source = "prometheus": PromQL range queries over
    whole hours give the hourly rollups (importing an hour again replaces it),
    and each Slurm job (label hpc_job) that ended gets its summary from
    *_over_time queries over its span, as jobstats does.
    """
    from slurm_acme.report.period import parse_instant
    from slurm_acme.telemetry.prometheus import PrometheusClient, import_window

    app: AppContext = ctx.obj
    t = app.config.telemetry
    if url is None:
        if t.source != "prometheus" or not t.prometheus_url:
            raise InputError('telemetry.source is not "prometheus" with a telemetry.prometheus_url; '
                             "set both in acme.toml or pass --url")
        url = t.prometheus_url
    now = time.time()
    start = parse_instant(since, "--since") if since else now - 7200
    end = parse_instant(until, "--until") if until else now
    if end <= start:
        raise InputError(f"--until must be after --since (got {since!r} .. {until!r})")
    result = import_window(app.store(), PrometheusClient(url), app.config.cluster.name, start, end,
                           step=step or t.interval_s, now=now, selector=selector)
    out = {"hours": result.hours, "gpu_samples": result.gpu_samples, "rollup_rows": result.rollup_rows,
           "jobs_summarised": result.jobs_summarised}
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(f"imported {result.gpu_samples} GPU samples over {result.hours} hours into "
                   f"{result.rollup_rows} rollup rows; summarised {len(result.jobs_summarised)} jobs")
