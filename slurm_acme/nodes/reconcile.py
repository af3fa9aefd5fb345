"""Carrying the drain policy out: drain through Slurm's door, resume, and record who.

Draining needs Slurm operator rights, so it only ever runs as root: ``sacme
nodes reconcile`` (a cron line or systemd timer), and each root-run node
collector for its own node. Never inside a user's job. The share cap is checked
and acted on under the store's drain lock, so collectors that all see a failure
at once still drain no more than the cap.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from slurm_acme.config import NodesConfig
from slurm_acme.errors import AccessDenied
from slurm_acme.nodes.policy import Plan, Verdict, plan
from slurm_acme.slurm import Slurm, SlurmError
from slurm_acme.store import Store
from slurm_acme.store import nodes as ledger

log = logging.getLogger(__name__)


def require_root(what: str) -> None:
    """Refuse, in one line, a drain or resume by anyone but root."""
    if os.geteuid() != 0:
        raise AccessDenied(f"sacme nodes {what}: draining and resuming nodes need Slurm operator "
                           f"rights, so only root may (--dry-run shows the plan to anyone)")


def operator() -> str:
    """Who is acting: root, and the admin behind sudo when there is one."""
    who = ledger.whoami()
    sudo = os.environ.get("SUDO_USER")
    return f"{who} (sudo by {sudo})" if sudo and os.geteuid() == 0 and sudo != who else who


@dataclass(frozen=True)
class Result:
    """A reconcile: the plan, and what Slurm accepted or refused."""

    plan: Plan
    drained: tuple[Verdict, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()
    dry_run: bool = True
    notes: tuple[str, ...] = field(default=())


def reconcile(store: Store, slurm: Slurm, policy: NodesConfig, cluster: str, *, dry_run: bool,
              only: Iterable[str] | None = None, now: float | None = None) -> Result:
    """Drain what the policy says (``only``: just these nodes, as a collector does for
    its own). A dry run, or a policy with ``drain = false``, changes nothing."""
    now = time.time() if now is None else now
    wanted = list(only) if only is not None else None
    if dry_run or not policy.drain:
        planned = plan(ledger.histories(store, cluster=cluster), slurm.show_nodes(), policy, now,
                       only=wanted)
        notes = () if policy.drain or dry_run else (
            "the drain policy is off (nodes.drain = false in the system config): nothing drained",)
        return Result(planned, dry_run=True, notes=notes)
    require_root("reconcile")
    drained: list[Verdict] = []
    refused: list[tuple[str, str]] = []
    with ledger.drain_lock(store) as conn:
        planned = plan(ledger.histories(store, cluster=cluster), slurm.show_nodes(), policy, now,
                       only=wanted)
        for verdict in planned.drain:
            reason = verdict.reason(policy)
            try:
                slurm.drain_node(verdict.node, reason)
            except SlurmError as exc:
                refused.append((verdict.node, str(exc)))
                continue
            ledger.insert_action(conn, ledger.NodeAction(
                cluster=cluster, node=verdict.node, ts=time.time(), action="drain", reason=reason,
                by_user=operator()))
            log.warning("drained %s: %s", verdict.node, reason)
            drained.append(verdict)
    return Result(planned, drained=tuple(drained), refused=tuple(refused), dry_run=False)


def resume(store: Store, slurm: Slurm, cluster: str, node: str, *, note: str = "") -> ledger.NodeAction:
    """Return ``node`` to service and record who did it (root only)."""
    require_root("resume")
    slurm.resume_node(node)
    return ledger.record_action(store, cluster=cluster, node=node, action="resume",
                                reason=note or "returned to service", by_user=operator())
