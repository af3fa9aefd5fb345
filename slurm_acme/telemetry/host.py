"""CPU and memory of the node through psutil."""

from __future__ import annotations

from slurm_acme.telemetry.records import Reading


class HostSampler:
    name = "host"

    def __init__(self) -> None:
        self.psutil = None

    def probe(self) -> str | None:
        import psutil

        self.psutil = psutil
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement
        return None

    def sample(self, busy: dict[int, str]) -> Reading:
        assert self.psutil is not None
        memory = self.psutil.virtual_memory()
        return Reading(node={"cpu_percent": self.psutil.cpu_percent(interval=None),
                             "mem_percent": memory.percent,
                             "mem_used_bytes": float(memory.total - memory.available)})

    def close(self) -> None:
        return None
