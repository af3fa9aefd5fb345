"""What one sampling tick produces, and the checks every raw sensor value passes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

#: Values sensors print when they have no reading: NVML's and DCGM's blank
#: sentinels (32-bit and 64-bit all-ones, 16-bit all-ones) and DCGM's int32 blank.
SENTINELS = frozenset({4294967295, 4294967294, 18446744073709551615, 65535, 2147483647,
                       2147483632, 9223372036854775792})

#: GPU fields the collector records, in ``gpu_samples`` column names.
GPU_FIELDS = ("util_percent", "sm_active", "tensor_active", "dram_active", "mem_used_bytes",
              "mem_total_bytes", "power_w", "temp_c", "ecc_dbe", "xid")
#: Node fields the collector records, in ``node_samples`` column names.
NODE_FIELDS = ("cpu_percent", "mem_percent", "mem_used_bytes", "node_power_w", "ib_rx_bytes",
               "ib_tx_bytes")


def checked(value: Any, name: str, flags: list[str]) -> float | None:
    """A sensor value as a float, or None with a flag when it is a sentinel or garbage.

    Why: a 4294967295 W power reading averaged into a job summary would make
    the whole summary wrong; it must be dropped and the drop must be visible.
    """
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        flags.append(f"garbage:{name}")
        return None
    if math.isnan(number) or math.isinf(number):
        flags.append(f"garbage:{name}")
        return None
    if number in SENTINELS:
        flags.append(f"sentinel:{name}")
        return None
    if number < 0:
        flags.append(f"negative:{name}")
        return None
    return number


@dataclass
class Reading:
    """What one sampler saw in one tick: per-GPU fields, node fields, and flags.

    Mutable only while the collector merges samplers' readings; rows written
    from it are plain dicts.
    """

    gpus: dict[int, dict[str, Any]] = field(default_factory=dict)
    node: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)

    def merge(self, other: Reading) -> None:
        """Fill fields still missing from ``other`` (earlier samplers win)."""
        for index, fields in other.gpus.items():
            mine = self.gpus.setdefault(index, {})
            for key, value in fields.items():
                if mine.get(key) is None and value is not None:
                    mine[key] = value
                elif key == "flags":
                    mine["flags"] = [*mine.get("flags", []), *value]
        for key, value in other.node.items():
            if self.node.get(key) is None:
                self.node[key] = value
        self.flags.extend(other.flags)
