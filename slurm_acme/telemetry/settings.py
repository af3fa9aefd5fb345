"""Everything one node collector needs to know, derived once from acme.toml and flags."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from slurm_acme.config import AcmeConfig


def default_node_name() -> str:
    """Slurm's name for this node (emulated nodes share a host, so prefer SLURMD_NODENAME)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


@dataclass(frozen=True)
class CollectorSettings:
    cluster: str
    node: str
    spool_dir: Path
    store_url: str | None
    interval_s: float = 15.0
    flush_interval_s: float = 60.0
    flush_batch: int = 5000
    sensor_timeout_s: float = 5.0
    samplers: tuple[str, ...] = ("nvml", "dcgm", "ipmi", "host", "infiniband")
    synthetic_gpus: int = 0
    min_coverage: float = 0.8
    spool_keep_hours: float = 24.0
    slurm_timeout_s: float = 10.0

    @property
    def node_dir(self) -> Path:
        return self.spool_dir / self.node

    @property
    def marks_dir(self) -> Path:
        return self.node_dir / "marks"

    @property
    def spool_url(self) -> str:
        return f"sqlite:///{self.node_dir / 'spool.db'}"

    @property
    def pidfile(self) -> Path:
        return self.node_dir / "collectd.pid"

    @property
    def lockfile(self) -> Path:
        return self.node_dir / "collectd.lock"

    @classmethod
    def from_config(cls, config: AcmeConfig, *, node: str | None = None,
                    store_url: str | None = None, **overrides: object) -> CollectorSettings:
        t = config.telemetry
        values: dict[str, object] = {
            "cluster": config.cluster.name, "node": node or default_node_name(),
            "spool_dir": Path(t.spool_dir), "store_url": store_url, "interval_s": t.interval_s,
            "flush_interval_s": t.flush_interval_s, "flush_batch": t.flush_batch,
            "sensor_timeout_s": t.sensor_timeout_s, "samplers": tuple(t.samplers),
            "synthetic_gpus": t.synthetic_gpus, "min_coverage": t.min_coverage,
            "spool_keep_hours": t.spool_keep_hours,
            "slurm_timeout_s": min(config.slurm.command_timeout_s, 10.0)}
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "spool_dir" in overrides and overrides["spool_dir"] is not None:
            values["spool_dir"] = Path(str(overrides["spool_dir"]))
        return cls(**values)  # type: ignore[arg-type]
