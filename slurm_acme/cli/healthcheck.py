"""``sacme healthcheck``: find faulty nodes with two rounds of allgather tests.

Exit 0 when every node is good, 1 when bad nodes were found, 2 for usage or
Slurm errors. The verdicts go to stdout (a table, or ``--json``); progress
goes to stderr.
"""

from __future__ import annotations

import os

import click
from rich.console import Console
from rich.table import Table

from slurm_acme.errors import CheckFailed, InputError
from slurm_acme.health import HealthReport, run_health_check


@click.command("healthcheck")
@click.option("--nodes", "nodelist", default=None,
              help="Nodes to check, a Slurm hostlist (node[1-4]).")
@click.option("--job", "job_id", default=None,
              help="Check the nodes of this running job, as steps inside its allocation. "
                   "Default inside a job: $SLURM_JOB_ID.")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto",
              show_default=True, help="auto: NCCL where an NVIDIA driver shows GPUs, else gloo.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=60.0,
              show_default=True, help="Hard timeout of each collective test, seconds.")
@click.option("--min-busbw", type=click.FloatRange(min=0.0), default=None,
              help="A test also fails below this allgather bus bandwidth (GB/s).")
@click.option("--gpus-per-node", type=click.IntRange(min=0), default=None,
              help="Tasks (GPUs) per node in each test. Default: the allocation's GPUs "
                   "with NCCL, 1 with gloo.")
@click.option("--seed", type=int, default=None, help="Seed of round 1's random pairing.")
@click.option("--no-precheck", is_flag=True, help="Skip the node-local pre-checks.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def healthcheck(nodelist: str | None, job_id: str | None, backend: str, timeout_s: float,
                min_busbw: float | None, gpus_per_node: int | None, seed: int | None,
                no_precheck: bool, as_json: bool) -> None:
    """Find faulty nodes: pair tests in round 1, suspects re-paired in round 2."""
    err = Console(stderr=True)
    nodes, job_id = _target(nodelist, job_id)
    report = run_health_check(
        nodes, backend=backend, timeout_s=timeout_s, min_busbw=min_busbw,
        gpus_per_node=gpus_per_node, job_id=job_id, seed=seed, prechecks=not no_precheck,
        progress=lambda msg: err.print(f"[dim]healthcheck:[/] {msg}", highlight=False),
    )
    if as_json:
        click.echo(report.to_json())
    else:
        Console(highlight=False).print(_table(report))
    if report.bad_nodes:
        raise CheckFailed(f"{len(report.bad_nodes)} bad node(s): {','.join(report.bad_nodes)} "
                          f"(found in {report.rounds} round(s), {report.tests} test(s))")


def _target(nodelist: str | None, job_id: str | None) -> tuple[list[str], str | None]:
    """The nodes to check and the allocation to run in, from the flags or $SLURM_JOB_ID."""
    from slurm_acme.slurm import JobState, default_client

    if nodelist and job_id:
        raise InputError("healthcheck: give --nodes or --job, not both")
    slurm = default_client(timeout=30)
    if nodelist:
        nodes = slurm.show_hostnames(nodelist)
        if not nodes:
            raise InputError(f"healthcheck: --nodes {nodelist!r} names no nodes")
        return nodes, os.environ.get("SLURM_JOB_ID") or None
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if not job_id:
        raise InputError("healthcheck: give --nodes LIST or --job JOBID (or run inside a job)")
    if not job_id.isdigit():
        raise InputError(f"healthcheck: --job {job_id!r} is not a job id")
    job = slurm.show_job(job_id)
    if job.state is not JobState.RUNNING or not job.nodelist:
        raise InputError(f"healthcheck: job {job_id} is {job.state.value}, not running; "
                         "its allocation is needed to run the tests")
    return slurm.show_hostnames(job.nodelist), job_id


def _table(report: HealthReport) -> Table:
    table = Table(title=f"health check: {len(report.bad_nodes)} bad of "
                        f"{len(report.bad_nodes) + len(report.good_nodes)} node(s), "
                        f"{report.rounds} round(s), {report.tests} test(s), {report.backend}")
    for column in ("node", "verdict", "test", "round", "with", "busbw GB/s", "error"):
        table.add_column(column)
    for node in (*report.bad_nodes, *report.good_nodes):
        bad = node in report.bad_nodes
        verdict = "[red]BAD[/]" if bad else "[green]good[/]"
        # the observation behind the verdict: the last failure of a bad node,
        # the last pass of a good one
        last = [e for e in report.evidence_for(node) if e.passed != bad][-1:]
        for ev in last:
            others = ",".join(n for n in ev.nodes if n != node) or "-"
            busbw = f"{ev.busbw_gbps:.3f}" if ev.busbw_gbps is not None else "-"
            table.add_row(node, verdict, ev.test, str(ev.round), others, busbw,
                          (ev.error or "")[:120])
        if not last:
            table.add_row(node, verdict, "-", "-", "-", "-", "")
    if report.notes:
        table.caption = "\n".join(report.notes)
    return table
