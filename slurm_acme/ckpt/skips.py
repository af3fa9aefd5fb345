"""``ACME_SKIP_STEPS``: absolute, inclusive step ranges whose batches are skipped.

The supervisor sets it after a loss-spike rollback (e.g. ``100-120,300-300``), so
the skip survives requeues: it is part of the job's environment, not its memory.
Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class StepRanges:
    ranges: tuple[tuple[int, int], ...] = ()

    def __contains__(self, step: int) -> bool:
        return any(lo <= step <= hi for lo, hi in self.ranges)

    def __str__(self) -> str:
        return ",".join(f"{lo}-{hi}" for lo, hi in self.ranges)


def parse_step_ranges(text: str, name: str = "ACME_SKIP_STEPS") -> StepRanges:
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
    env = os.environ if env is None else env
    return parse_step_ranges(env.get("ACME_SKIP_STEPS", ""))
