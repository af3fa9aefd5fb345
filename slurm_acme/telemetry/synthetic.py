"""SYNTHETIC GPU data for the emulated local cluster, where the GPUs are empty files.

Never on by default: it runs only when ``telemetry.synthetic_gpus`` (or the
collector's ``--synthetic-gpus``) asks for it, and every row it writes says
``source='synthetic'`` and carries the ``synthetic`` flag, so no report can
mistake it for a measurement. Busy GPUs (those a job holds) look busy, idle
ones draw idle power, which is enough to exercise attribution and summaries.
"""

from __future__ import annotations

import random

from slurm_acme.telemetry.records import Reading

GIB = 1024 ** 3
MEMORY_BYTES = 80 * GIB


class SyntheticGpuSampler:
    name = "synthetic"

    def __init__(self, count: int, node: str) -> None:
        self.count = count
        self.node = node
        self.rng = random.Random(f"acme-synthetic-{node}")

    def probe(self) -> str | None:
        return None if self.count > 0 else "no synthetic GPUs configured"

    def sample(self, busy: dict[int, str]) -> Reading:
        reading = Reading()
        for index in range(self.count):
            r = self.rng.random()
            if index in busy:
                fields = {"util_percent": 80 + 20 * r, "sm_active": 0.45 + 0.4 * r,
                          "tensor_active": 0.2 + 0.3 * r, "dram_active": 0.3 + 0.3 * r,
                          "mem_used_bytes": (0.5 + 0.4 * r) * MEMORY_BYTES,
                          "power_w": 280 + 120 * r, "temp_c": 60 + 15 * r}
            else:
                fields = {"util_percent": 0.0, "sm_active": 0.0, "tensor_active": 0.0,
                          "dram_active": 0.0, "mem_used_bytes": 0.0,
                          "power_w": 60 + 15 * r, "temp_c": 30 + 5 * r}
            reading.gpus[index] = {**fields, "mem_total_bytes": float(MEMORY_BYTES),
                                   "ecc_dbe": 0, "gpu_uuid": f"SYNTHETIC-{self.node}-{index}",
                                   "source": "synthetic", "flags": ["synthetic"]}
        return reading

    def close(self) -> None:
        return None
