"""The node collector's ``/metrics``: its latest samples in Prometheus exposition format.

GPU metrics carry dcgm-exporter's names, units and labels (``gpu``, ``UUID``,
``device``, ``modelName``, ``Hostname``, and ``hpc_job``, the label of
dcgm-exporter's HPC job mapping, holding the Slurm job that holds the GPU), so
Grafana dashboards and PromQL written for dcgm-exporter work unchanged. Node
metrics have ``acme_node_*`` names. Every series also carries ``cluster`` and
``source`` (``nvml``, ``dcgm`` or ``synthetic``: emulated GPUs never pass for
real ones). Served by ``prometheus-client`` from a daemon thread; the sampling
loop only swaps in the latest tick. Like dcgm-exporter, no sample timestamps
are exposed: Prometheus stamps each scrape, so a job's series go stale (and
drop out of range queries) as soon as its GPUs are released.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIB = 2**20

#: (dcgm-exporter metric, help, sample field, scale): the field times scale is the value.
GPU_SERIES: tuple[tuple[str, str, str, float], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util_percent", 1.0),
    ("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned (ratio).",
     "sm_active", 1.0),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active (ratio).",
     "tensor_active", 1.0),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active (ratio).",
     "dram_active", 1.0),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "mem_used_bytes", 1.0 / MIB),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w", 1.0),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temp_c", 1.0),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "xid", 1.0),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", "ecc_dbe", 1.0),
)
#: The framebuffer's free MiB (dcgm-exporter exports used and free, not total).
FB_FREE = "DCGM_FI_DEV_FB_FREE"
GPU_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname", "hpc_job", "cluster", "source")

NODE_SERIES: tuple[tuple[str, str, str], ...] = (
    ("acme_node_cpu_utilisation_percent", "CPU utilisation of the node (in %).", "cpu_percent"),
    ("acme_node_memory_used_percent", "Host memory used (in %).", "mem_percent"),
    ("acme_node_power_watts", "Server power draw from IPMI/DCMI (in W).", "node_power_w"),
    ("acme_node_ib_receive_bytes", "InfiniBand bytes received during the last sampling interval.",
     "ib_rx_bytes"),
    ("acme_node_ib_transmit_bytes", "InfiniBand bytes sent during the last sampling interval.",
     "ib_tx_bytes"),
)
NODE_LABELS = ("Hostname", "cluster")


@dataclass(frozen=True)
class LatestTick:
    """What ``/metrics`` shows: the rows of the collector's latest tick."""

    gpu_rows: tuple[Mapping[str, Any], ...] = ()
    node_row: Mapping[str, Any] | None = None


class TickCollector:
    """A prometheus-client collector over the latest tick (replaced atomically)."""

    def __init__(self) -> None:
        self.latest = LatestTick()

    def update(self, gpu_rows: Sequence[Mapping[str, Any]], node_row: Mapping[str, Any]) -> None:
        self.latest = LatestTick(tuple(gpu_rows), node_row)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        tick = self.latest
        for name, doc, field, scale in GPU_SERIES:
            family = GaugeMetricFamily(name, doc, labels=GPU_LABELS)
            for row in tick.gpu_rows:
                if row.get(field) is not None:
                    family.add_metric(_gpu_labels(row), float(row[field]) * scale)
            yield family
        free = GaugeMetricFamily(FB_FREE, "Framebuffer memory free (in MiB).", labels=GPU_LABELS)
        for row in tick.gpu_rows:
            if row.get("mem_used_bytes") is not None and row.get("mem_total_bytes"):
                free.add_metric(_gpu_labels(row), (float(row["mem_total_bytes"]) - float(row["mem_used_bytes"])) / MIB)
        yield free
        node = tick.node_row
        for name, doc, field in NODE_SERIES:
            family = GaugeMetricFamily(name, doc, labels=NODE_LABELS)
            if node is not None and node.get(field) is not None:
                family.add_metric([str(node["node"]), str(node["cluster"])], float(node[field]))
            yield family


def _gpu_labels(row: Mapping[str, Any]) -> list[str]:
    index = int(row["gpu_index"])
    return [str(index), str(row.get("gpu_uuid") or ""), f"nvidia{index}", str(row.get("model") or ""),
            str(row["node"]), str(row.get("job_id") or ""), str(row["cluster"]), str(row.get("source") or "")]


class MetricsServer:
    """``/metrics`` on ``address:port`` in a daemon thread (port 0: any free port)."""

    def __init__(self, address: str, port: int) -> None:
        from prometheus_client import CollectorRegistry

        self.address, self.requested_port = address, port
        self.collector = TickCollector()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Start serving; returns the port bound."""
        from prometheus_client import start_http_server

        self._server, self._thread = start_http_server(self.requested_port, self.address, registry=self.registry)
        return int(self._server.server_port)

    @property
    def port(self) -> int | None:
        return int(self._server.server_port) if self._server is not None else None

    def update(self, gpu_rows: Sequence[Mapping[str, Any]], node_row: Mapping[str, Any]) -> None:
        self.collector.update(gpu_rows, node_row)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
