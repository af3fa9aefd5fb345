"""Hardware events a node's collector sees, as node-health ledger events.

Samplers report gauges (the latest XID, a cumulative double-bit ECC count, the
row remapper's failure flag) and NVML's XID event stream. The ledger needs
events with a time and a code, once each: this turns one tick's reading into
the events that are new since the previous tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurm_acme.store.nodes import NodeEvent
from slurm_acme.telemetry.records import Reading

#: XID codes by what they say about the node (NVIDIA's XID catalogue).
ECC_XIDS = frozenset({48, 63, 64, 92, 94, 95})
NVLINK_XIDS = frozenset({74, 137, *range(144, 151)})
OFF_THE_BUS_XIDS = frozenset({79})


def xid_category(xid: int) -> str:
    """The failure category of an XID, in the rule book's names."""
    if xid in OFF_THE_BUS_XIDS:
        return "NodeFailure"
    if xid in ECC_XIDS:
        return "ECCError"
    if xid in NVLINK_XIDS:
        return "NVLinkError"
    return "XidError"


@dataclass
class HardwareWatch:
    """Remembers each GPU's last gauges, so a sticky value becomes one event."""

    cluster: str
    node: str
    dbe: dict[int, float] = field(default_factory=dict)
    remap: dict[int, bool] = field(default_factory=dict)
    xid: dict[int, int | None] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)

    def events(self, reading: Reading, busy: Mapping[int, str], now: float) -> list[NodeEvent]:
        out: list[NodeEvent] = []
        for index, fields in sorted(reading.gpus.items()):
            out += self._gpu_events(index, fields, busy.get(index), now)
        return out

    def _gpu_events(self, index: int, f: Mapping[str, Any], job: str | None, now: float) -> list[NodeEvent]:
        uuid = f.get("gpu_uuid") or "?"

        def event(category: str, code: str, text: str) -> NodeEvent:
            return NodeEvent(cluster=self.cluster, node=self.node, ts=now, source="hardware",
                             category=category, code=code, gpu_index=index, job_id=job,
                             evidence=(f"{self.node} GPU {index} ({uuid}): {text}",))

        found: list[NodeEvent] = []
        if "xid_events" in f:  # NVML's event stream: each XID once
            xids = [int(x) for x in f.get("xid_events") or ()]
        else:  # a sticky gauge (DCGM): a new value is a new event
            value = f.get("xid")
            xids = [int(value)] if value and value != self.xid.get(index) else []
            self.xid[index] = int(value) if value else None
        for xid in dict.fromkeys(xids):
            found.append(event(xid_category(xid), f"xid:{xid}", f"Xid {xid}"))
        dbe = f.get("ecc_dbe")
        if dbe is not None:
            if float(dbe) > self.dbe.get(index, 0.0):
                found.append(event("ECCError", "ecc_dbe", f"uncorrectable (double-bit) ECC errors: {dbe:g}"))
            self.dbe[index] = float(dbe)
        remap = f.get("remap_failed")
        if remap is not None:
            if remap and not self.remap.get(index):
                found.append(event("ECCError", "row_remap_failure", "row remapping failure occurred"))
            self.remap[index] = bool(remap)
        if f.get("lost"):
            if index not in self.lost:
                found.append(event("NodeFailure", "gpu_lost", "GPU is lost (fallen off the bus)"))
            self.lost.add(index)
        else:
            self.lost.discard(index)
        return found
