"""``ACME_SKIP_STEPS``: absolute, inclusive step ranges whose batches are skipped.

The supervisor sets it after a loss-spike rollback (e.g. ``100-120,300-300``), so
the skip survives requeues: it is part of the job's environment, not its memory.
Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_acme.contracts import ENV_SKIP_STEPS


@dataclass(frozen=True)
class StepRanges:
    """Inclusive step ranges; ``step in ranges`` tests membership."""

    ranges: tuple[tuple[int, int], ...] = ()

    def __contains__(self, step: int) -> bool:
        return any(lo <= step <= hi for lo, hi in self.ranges)

    def __str__(self) -> str:
        return ",".join(f"{lo}-{hi}" for lo, hi in self.ranges)


def parse_step_ranges(text: str, name: str = ENV_SKIP_STEPS) -> StepRanges:
    ranges = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            lo_i = int(lo)
            hi_i = int(hi) if sep else lo_i
        except ValueError:
            raise ValueError(f"{name}: {part!r} is not N or N-M") from None
        if lo_i < 0 or hi_i < lo_i:
            raise ValueError(f"{name}: {part!r} is not an increasing range of steps >= 0")
        ranges.append((lo_i, hi_i))
    return StepRanges(tuple(sorted(ranges)))


def skip_steps_from_env(env: Mapping[str, str] | None = None) -> StepRanges:
    """The steps the supervisor asks this attempt to skip (``$ACME_SKIP_STEPS``).

    After a loss-spike rollback the batches of the bad steps are skipped, so the
    spike does not recur. Use it as ``if step in skips: continue`` (after drawing
    the step's batch, so the data position stays the same). Raises ValueError naming
    the bad part.
    """
    env = os.environ if env is None else env
    return parse_step_ranges(env.get(ENV_SKIP_STEPS, ""))
