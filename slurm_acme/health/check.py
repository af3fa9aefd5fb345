"""``run_health_check``: pre-checks, then the two-round bisection over srun steps.

This is the library entry point the in-job supervisor calls before it
launches training, and what ``sacme healthcheck`` wraps. Inside an allocation
(``job_id`` given or ``SLURM_JOB_ID`` set) every test is a step of that
allocation; otherwise srun makes a small allocation per test.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from slurm_acme.errors import InputError
from slurm_acme.health.bisection import bisect
from slurm_acme.health.faults import FAULT_ENV, parse_faults
from slurm_acme.health.precheck import UNAVAILABLE, NodePrecheck
from slurm_acme.health.records import Evidence, HealthReport
from slurm_acme.health.steps import StepShape, precheck_step
from slurm_acme.health.transport import SrunTransport
from slurm_acme.slurm.parse import gpus_in_tres
from slurm_acme.slurm.steps import step_env

log = logging.getLogger(__name__)

BACKENDS = ("auto", "nccl", "gloo")
#: Seconds a step may take to launch and import torch before the collective's clock starts.
STARTUP_S = 120.0
PRECHECK_TIMEOUT_S = 60.0
#: Gathered buffer per test: big enough to load NVLink/IB, small enough for CPU gloo.
SIZE_MB = {"nccl": 256.0, "gloo": 4.0}
NVIDIA_DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")


def run_health_check(nodes: Sequence[str], *, backend: str = "auto", timeout_s: float = 60.0,
                     min_busbw: float | None = None, gpus_per_node: int | None = None,
                     job_id: str | None = None, seed: int | None = None,
                     progress: Callable[[str], None] | None = None,
                     size_mb: float | None = None, prechecks: bool = True,
                     parallel: int = 64, known_good: Sequence[str] = ()) -> HealthReport:
    """Find the bad nodes among ``nodes`` and say why, in two rounds of allgather tests;
    with ``known_good``, only ``nodes`` are tested, each paired with one of those."""
    nodes = list(dict.fromkeys(n.strip() for n in nodes if n.strip()))
    _validate(nodes, backend, timeout_s, min_busbw, gpus_per_node)
    say = progress or log.info
    job_id = job_id or os.environ.get("SLURM_JOB_ID") or None
    resolved = resolve_backend(backend)
    gpus = gpus_per_node if gpus_per_node is not None else allocated_gpus_per_node(job_id)
    tasks = max(1, gpus_per_node or 1) if resolved == "gloo" else max(1, gpus or 1)
    shape = StepShape(backend=resolved, tasks_per_node=tasks, gpus_per_node=gpus or 0,
                      timeout_s=timeout_s, startup_s=STARTUP_S,
                      size_mb=size_mb or SIZE_MB[resolved], iters=5, job_id=job_id)
    say(f"health check of {len(nodes)} node(s): backend {resolved}, {tasks} task(s) per node, "
        f"{'inside job ' + job_id if job_id else 'standalone srun'}")

    notes: list[str] = []
    evidence: list[Evidence] = []
    condemned: list[str] = []
    if prechecks:
        condemned, evidence, notes = _prechecks(nodes, job_id, gpus, say)
    testable = [n for n in nodes if n not in condemned]
    good = [n for n in known_good if n not in nodes]
    transport = SrunTransport(shape, node_addresses([*testable, *good]), min_busbw=min_busbw,
                              cancel_step=_cancel_step)
    outcome = bisect(testable, transport, seed=seed, parallel=parallel, progress=say,
                     known_good=good)
    if outcome.fallback_single_node:
        notes.append("no group passed round 1: fell back to single-node tests, "
                     "which cannot blame an inter-node link")
    bad = set(condemned) | set(outcome.bad)
    return HealthReport(
        bad_nodes=tuple(n for n in nodes if n in bad),
        good_nodes=tuple(n for n in nodes if n not in bad),
        rounds=outcome.rounds, tests=outcome.tests,
        evidence=(*evidence, *outcome.evidence),
        fallback_single_node=outcome.fallback_single_node,
        backend=resolved, notes=tuple(notes),
    )


def _validate(nodes: list[str], backend: str, timeout_s: float, min_busbw: float | None,
              gpus_per_node: int | None) -> None:
    if not nodes:
        raise InputError("health check: no nodes to check")
    if backend not in BACKENDS:
        raise InputError(f"health check: backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if not timeout_s > 0:
        raise InputError(f"health check: timeout must be > 0 seconds, got {timeout_s!r}")
    if min_busbw is not None and min_busbw < 0:
        raise InputError(f"health check: min busbw must be >= 0 GB/s, got {min_busbw!r}")
    if gpus_per_node is not None and gpus_per_node < 0:
        raise InputError(f"health check: gpus per node must be >= 0, got {gpus_per_node!r}")
    parse_faults(os.environ.get(FAULT_ENV, ""))  # a typo in a drill is an error, not a pass


def resolve_backend(backend: str, driver_gpus: Path = NVIDIA_DRIVER_GPUS) -> str:
    """``auto`` is NCCL where an NVIDIA driver shows GPUs on this node, else gloo.

    Decided here, without importing torch, because the step's shape (tasks per
    node, GPUs per node) depends on it; the nodes of one check are assumed alike.
    """
    if backend != "auto":
        return backend
    has_gpus = driver_gpus.is_dir() and any(driver_gpus.iterdir())
    return "nccl" if has_gpus else "gloo"


def allocated_gpus_per_node(job_id: str | None) -> int | None:
    """GPUs per node of the allocation: ``SLURM_GPUS_ON_NODE``, else the job's TresPerNode."""
    env = os.environ.get("SLURM_GPUS_ON_NODE", "")
    if env.isdigit() and (job_id is None or job_id == os.environ.get("SLURM_JOB_ID")):
        return int(env)
    if job_id:
        from slurm_acme.slurm import SlurmError, default_client

        try:
            return gpus_in_tres(default_client(timeout=30).show_job(job_id).get("TresPerNode"))
        except SlurmError as exc:
            log.warning("health: cannot read job %s's GPUs per node: %s", job_id, exc)
    return None


def node_addresses(nodes: Sequence[str]) -> dict[str, str]:
    """Each node's NodeAddr from Slurm (a test's master address); names where Slurm says nothing."""
    if not nodes:
        return {}
    from slurm_acme.slurm import Slurm, SlurmError

    try:
        return Slurm(timeout=30).node_addresses(nodes)
    except SlurmError as exc:
        log.warning("health: cannot read node addresses, using node names: %s", exc)
        return {}


def _cancel_step(step_id: str) -> None:
    from slurm_acme.slurm import default_client

    default_client(timeout=15).scancel([step_id])


def _prechecks(nodes: list[str], job_id: str | None, gpus: int | None,
               say: Callable[[str], None]) -> tuple[list[str], list[Evidence], list[str]]:
    """Run the node-local pre-checks as one step; (condemned nodes, evidence, notes)."""
    say(f"pre-checks on {len(nodes)} node(s)")
    from slurm_acme.slurm import SlurmUnavailable, run_step

    request, command = precheck_step(nodes, job_id=job_id, expect_gpus=gpus,
                                     timeout_s=PRECHECK_TIMEOUT_S)
    try:
        step = run_step(request, command, timeout=PRECHECK_TIMEOUT_S, env=step_env(os.environ))
        stdout, failure = step.stdout, (step.stderr.strip().splitlines() or [""])[-1]
        if step.returncode == 0:
            failure = ""
        elif step.timed_out:
            failure = f"no answer in {PRECHECK_TIMEOUT_S:g}s"
    except SlurmUnavailable:
        stdout, failure = "", "srun not found"
    reports = parse_precheck_output(stdout)
    notes = summarise_prechecks(reports, nodes)
    if failure:
        notes.append(f"pre-check step failed ({failure}); the pair tests still run")
    for note in notes:
        say(note)
    condemned, evidence = [], []
    for report in reports:
        if report.node in nodes and report.bad:
            condemned.append(report.node)
            evidence += [Evidence((report.node,), f"precheck:{c.name}", 0, False, c.detail)
                         for c in report.bad]
    return condemned, evidence, notes


def parse_precheck_output(stdout: str) -> list[NodePrecheck]:
    reports = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                reports.append(NodePrecheck.from_json(line))
            except (ValueError, KeyError, TypeError):
                continue
    return reports


def summarise_prechecks(reports: Sequence[NodePrecheck], nodes: Sequence[str]) -> list[str]:
    """One line per check that was not available (not one per node), and silent nodes."""
    notes = []
    unavailable: dict[str, str] = {}
    for report in reports:
        for check in report.checks:
            if check.status == UNAVAILABLE:
                unavailable.setdefault(check.name, check.detail)
    for name, detail in unavailable.items():
        notes.append(f"pre-check {name}: not available ({detail})")
    answered = {r.node for r in reports}
    silent = [n for n in nodes if n not in answered]
    if silent:
        notes.append(f"pre-checks gave no answer from {', '.join(silent)}")
    return notes


__all__ = ["resolve_backend", "run_health_check"]
