"""InfiniBand traffic from the sysfs port counters (no tools, no root needed)."""

from __future__ import annotations

from pathlib import Path

from slurm_acme.telemetry.records import Reading

#: ``port_*_data`` count 4-byte words (InfiniBand spec, "octets divided by 4").
WORD_BYTES = 4


def read_counters(root: Path) -> tuple[int, int] | None:
    """Summed received and transmitted bytes over every HCA port, or None."""
    rx = tx = 0
    found = False
    for counters in sorted(root.glob("*/ports/*/counters")):
        try:
            rx += int((counters / "port_rcv_data").read_text()) * WORD_BYTES
            tx += int((counters / "port_xmit_data").read_text()) * WORD_BYTES
        except (OSError, ValueError):
            continue
        found = True
    return (rx, tx) if found else None


class InfinibandSampler:
    """Bytes moved since the previous tick (a counter reset is flagged, not negative)."""

    name = "infiniband"

    def __init__(self, root: str = "/sys/class/infiniband") -> None:
        self.root = Path(root)
        self.last: tuple[int, int] | None = None

    def probe(self) -> str | None:
        self.last = read_counters(self.root)
        return None if self.last is not None else f"no InfiniBand port counters under {self.root}"

    def sample(self, busy: dict[int, str]) -> Reading:
        now = read_counters(self.root)
        if now is None:
            return Reading(flags=["ib_unreadable"])
        last, self.last = self.last, now
        if last is None or now[0] < last[0] or now[1] < last[1]:
            return Reading(flags=["ib_counter_reset"] if last else [])
        return Reading(node={"ib_rx_bytes": float(now[0] - last[0]),
                             "ib_tx_bytes": float(now[1] - last[1])})

    def close(self) -> None:
        return None
