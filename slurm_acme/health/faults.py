"""Fault injection for tests and drills: make a named node fail its collective.

``ACME_HEALTH_FAULT=node2:raise,node3:hang,node4:slow`` (or ``slow:2.5`` for
the extra seconds per iteration). The parent process leaves the variable in
the environment and srun propagates it (``--export=ALL``) to the worker on
every node; the worker looks up its own node name (``SLURMD_NODENAME``) and
misbehaves inside the collective loop, where a real fault would show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurm_acme.errors import InputError

FAULT_ENV = "ACME_HEALTH_FAULT"
FAULT_KINDS = ("raise", "hang", "slow")
DEFAULT_SLOW_S = 1.0


@dataclass(frozen=True)
class Fault:
    """What one node does wrong: ``raise`` an error, ``hang`` forever, or run ``slow``."""

    kind: str
    delay_s: float = 0.0


def parse_faults(spec: str) -> dict[str, Fault]:
    """``"node2:raise,node4:slow:0.5"`` -> {node: Fault}; a bad entry is an InputError."""
    faults: dict[str, Fault] = {}
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        node, _, rest = entry.partition(":")
        kind, _, arg = rest.partition(":")
        if not node or kind not in FAULT_KINDS:
            raise InputError(f"{FAULT_ENV}: bad entry {entry!r}; want NODE:KIND with KIND one of "
                             f"{', '.join(FAULT_KINDS)} (e.g. node2:raise,node4:slow:0.5)")
        delay = DEFAULT_SLOW_S if kind == "slow" else 0.0
        if arg:
            try:
                delay = float(arg)
            except ValueError:
                raise InputError(f"{FAULT_ENV}: bad delay {arg!r} in {entry!r}") from None
        faults[node] = Fault(kind, delay)
    return faults


def fault_for(node: str, env: Mapping[str, str]) -> Fault | None:
    """The fault injected into ``node`` by ``env``, if any."""
    return parse_faults(env.get(FAULT_ENV, "")).get(node)
