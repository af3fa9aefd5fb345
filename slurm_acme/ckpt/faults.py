"""Fault injection for tests and the demo, parsed from ``ACME_FAULTS``.

``ACME_FAULTS`` is a ``;``-separated list of faults, each ``kind:key=value,...``:

* ``raise:step=6,node=node2,message=NCCL error: unhandled system error`` raises
  ``RuntimeError(message)`` at the start of that step (a real crash: traceback on stderr);
* ``hang:step=N`` sleeps forever at the start of that step;
* ``nan:step=N`` makes that step's loss NaN; ``spike:step=N,factor=F`` multiplies it by F
  (default 10). Both are tied to the data step, so once it is skipped they do not recur.

Filters: ``step`` (required), ``rank``, ``node`` (SLURMD_NODENAME or hostname),
``attempt`` (the supervisor's ``ACME_ATTEMPT``, which also counts restarts inside the
allocation; else SLURM_RESTART_COUNT; any when absent). A message may contain commas
and ``=``; it cannot contain ``;``. Torch-free.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slurm_acme.ckpt.distenv import dist_env, node_name
from slurm_acme.contracts import ENV_ATTEMPT, ENV_FAULTS

KINDS = ("raise", "hang", "nan", "spike")
KEYS = ("step", "rank", "node", "attempt", "message", "factor")
_KEY_START = re.compile(rf"^\s*({'|'.join(KEYS)})=")


@dataclass(frozen=True)
class Fault:
    """One injected failure (the test and demo fault plan): what happens
    (``kind``), at which step, and optionally only on one rank, node or attempt,
    so a scenario fails once and its recovery can be watched."""

    kind: str
    step: int
    rank: int | None = None
    node: str | None = None
    attempt: int | None = None
    message: str | None = None
    factor: float = 10.0

    def applies(self, step: int, rank: int, node: str, attempt: int) -> bool:
        return (step == self.step and (self.rank is None or self.rank == rank)
                and (self.node is None or self.node == node)
                and (self.attempt is None or self.attempt == attempt))


def _pairs(text: str, spec: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    last = None
    for piece in text.split(","):
        if _KEY_START.match(piece):
            key, value = piece.split("=", 1)
            last = key.strip()
            pairs[last] = value
        elif last is not None:
            pairs[last] += "," + piece
        else:
            raise ValueError(f"ACME_FAULTS: {spec!r}: expected key=value with keys {KEYS}")
    return pairs


def parse_fault(spec: str) -> Fault:
    kind, sep, rest = spec.strip().partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        raise ValueError(f"ACME_FAULTS: {spec!r}: unknown kind {kind!r}; valid: {KINDS}")
    pairs = _pairs(rest, spec) if sep and rest.strip() else {}
    if "step" not in pairs:
        raise ValueError(f"ACME_FAULTS: {spec!r}: step=N is required")
    try:
        return Fault(
            kind=kind, step=int(pairs["step"]),
            rank=int(pairs["rank"]) if "rank" in pairs else None,
            node=pairs["node"].strip() if "node" in pairs else None,
            attempt=int(pairs["attempt"]) if "attempt" in pairs else None,
            message=pairs.get("message"),
            factor=float(pairs["factor"]) if "factor" in pairs else 10.0)
    except ValueError as exc:
        raise ValueError(f"ACME_FAULTS: {spec!r}: {exc}") from exc


def parse_faults(text: str) -> tuple[Fault, ...]:
    return tuple(parse_fault(s) for s in text.split(";") if s.strip())


class FaultInjector:
    """Applies the faults that match this process (rank, node, attempt) at each step."""

    def __init__(self, faults: tuple[Fault, ...], rank: int, node: str, attempt: int) -> None:
        self.faults = faults
        self.rank, self.node, self.attempt = rank, node, attempt

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FaultInjector:
        env = os.environ if env is None else env
        attempt = int(env.get(ENV_ATTEMPT) or env.get("SLURM_RESTART_COUNT", "0") or 0)
        return cls(parse_faults(env.get(ENV_FAULTS, "")), dist_env(env).rank,
                   node_name(env), attempt)

    def _matching(self, step: int, *kinds: str) -> list[Fault]:
        return [f for f in self.faults
                if f.kind in kinds and f.applies(step, self.rank, self.node, self.attempt)]

    def before_step(self, step: int) -> None:
        """Crash or hang here if a raise/hang fault matches this step."""
        for fault in self._matching(step, "raise", "hang"):
            if fault.kind == "raise":
                raise RuntimeError(fault.message or f"injected fault at step {step}")
            while True:  # a hang: the supervisor's heartbeat watch must notice
                time.sleep(3600)

    def corrupt_loss(self, step: int, loss: Any) -> Any:
        """Return the loss as this step's nan/spike faults would make it."""
        for fault in self._matching(step, "nan", "spike"):
            loss = loss * float("nan") if fault.kind == "nan" else loss * fault.factor
        return loss
