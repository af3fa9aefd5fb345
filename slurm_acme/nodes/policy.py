"""The drain policy, as pure functions: ledger histories and node states in, a plan out.

A node is drained after one *decisive* event (an XID the site lists, an
uncorrectable ECC error, a failed row remap, a GPU fallen off the bus), or
after ``events_to_drain`` infrastructure events of distinct jobs within the
window. Events from before a node's last resume never count: an admin who
returned a node to service has dealt with them. slurm-acme never has more
than ``max_drained_share`` of the cluster drained at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurm_acme.config import NodesConfig
from slurm_acme.slurm.records import ScontrolNode
from slurm_acme.store.nodes import NodeEvent, NodeHistory

#: Every drain reason slurm-acme writes starts so (admins and NHC tell them apart).
REASON_PREFIX = "acme:"

def decisive_codes(policy: NodesConfig) -> frozenset[str]:
    return frozenset({*(f"xid:{x}" for x in policy.decisive_xids), *policy.decisive_codes})


def is_decisive(event: NodeEvent, policy: NodesConfig) -> bool:
    return event.code in decisive_codes(policy)


def window_text(hours: float) -> str:
    """``24h``, ``90m``: how the drain reason names the window."""
    return f"{hours:g}h" if hours >= 1 and float(hours).is_integer() else f"{hours * 60:g}m"


@dataclass(frozen=True)
class Verdict:
    """Why ``node`` should leave the pool: the events that count, and the reason to give Slurm."""

    node: str
    events: tuple[NodeEvent, ...]
    decisive: bool
    trigger: NodeEvent

    def reason(self, policy: NodesConfig) -> str:
        job = self.trigger.job_id or "none"
        count = len(self.events)
        return (f"{REASON_PREFIX} {self.trigger.category} job {job} "
                f"({count} in {window_text(policy.window_hours)})")

    def to_dict(self, policy: NodesConfig) -> dict[str, object]:
        return {"node": self.node, "reason": self.reason(policy), "decisive": self.decisive,
                "events": [e.id for e in self.events], "category": self.trigger.category,
                "job_id": self.trigger.job_id}


def counting_events(history: NodeHistory, policy: NodesConfig, now: float) -> tuple[NodeEvent, ...]:
    """The node's events inside the window and after its last resume."""
    since = now - policy.window_hours * 3600
    resumed = [a.ts for a in history.actions if a.action == "resume"]
    if resumed:
        since = max(since, max(resumed))
    return tuple(e for e in history.events if since < e.ts <= now + 1.0)


def _distinct(events: Sequence[NodeEvent]) -> list[NodeEvent]:
    """One event per job (a job's failure seen by its supervisor and by ``sacme
    diagnose`` is one failure); events of no job count each."""
    seen: set[str] = set()
    out = []
    for event in events:
        if event.job_id:
            if event.job_id in seen:
                continue
            seen.add(event.job_id)
        out.append(event)
    return out


def assess(history: NodeHistory, policy: NodesConfig, now: float) -> Verdict | None:
    """The verdict on one node, or None when its events stay below the policy."""
    events = _distinct(counting_events(history, policy, now))
    if not events:
        return None
    decisive = [e for e in events if is_decisive(e, policy)]
    if decisive:
        return Verdict(history.node, tuple(events), True, decisive[-1])
    if len(events) >= policy.events_to_drain:
        return Verdict(history.node, tuple(events), False, events[-1])
    return None


def decisive_nodes(histories: Mapping[str, NodeHistory], policy: NodesConfig, now: float) -> set[str]:
    """Nodes with a decisive event in the window since their last resume: a new
    attempt keeps off them even before anyone drains them."""
    return {name for name, h in histories.items()
            if any(is_decisive(e, policy) for e in counting_events(h, policy, now))}


@dataclass(frozen=True)
class Plan:
    """What reconcile would do: drain ``drain``; ``held`` waits for room under the cap."""

    total: int
    cap: int
    already: tuple[str, ...]
    drain: tuple[Verdict, ...]
    held: tuple[Verdict, ...]
    out_of_service: tuple[str, ...] = ()

    def to_dict(self, policy: NodesConfig) -> dict[str, object]:
        return {"nodes": self.total, "cap": self.cap, "drained_by_acme": list(self.already),
                "drain": [v.to_dict(policy) for v in self.drain],
                "held_by_cap": [v.to_dict(policy) for v in self.held],
                "already_out_of_service": list(self.out_of_service)}


def share_cap(total: int, policy: NodesConfig) -> int:
    """How many nodes slurm-acme may hold drained at once (rounded down)."""
    return math.floor(total * policy.max_drained_share + 1e-9)


def plan(histories: Mapping[str, NodeHistory], nodes: Sequence[ScontrolNode], policy: NodesConfig,
         now: float, *, only: Iterable[str] | None = None) -> Plan:
    """Which nodes to drain now. Decisive verdicts first, then the most events, then
    the most recent; a node Slurm already has out of service is left as it is;
    slurm-acme's own drains count against the cap."""
    names = {n.name for n in nodes}
    already = tuple(sorted(n.name for n in nodes if n.drained and n.reason.startswith(REASON_PREFIX)))
    out = {n.name for n in nodes if n.unavailable}
    wanted = set(only) if only is not None else names
    verdicts = [v for name, h in histories.items() if name in names and name in wanted
                and name not in out and (v := assess(h, policy, now)) is not None]
    verdicts.sort(key=lambda v: (not v.decisive, -len(v.events), -v.trigger.ts, v.node))
    cap = share_cap(len(names), policy)
    room = max(0, cap - len(already))
    skipped = tuple(sorted(name for name in out if name in histories and name in wanted
                           and name not in already))
    return Plan(total=len(names), cap=cap, already=already, drain=tuple(verdicts[:room]),
                held=tuple(verdicts[room:]), out_of_service=skipped)
