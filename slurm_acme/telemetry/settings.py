"""Everything one node collector needs to know, derived once from acme.toml and flags.

The telemetry options themselves are declared once, in
:class:`slurm_acme.config.TelemetryConfig`; the settings hold that validated
section (with any command-line overrides applied and validated the same way)
plus the few facts that come from elsewhere: cluster, node, store URL and the
Slurm command timeout.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_acme.config import AcmeConfig, NodesConfig, TelemetryConfig
from slurm_acme.errors import InputError
from slurm_acme.sections import SectionError


def default_node_name() -> str:
    """Slurm's name for this node (emulated nodes share a host, so prefer SLURMD_NODENAME)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def telemetry_with(base: TelemetryConfig, **overrides: Any) -> TelemetryConfig:
    """``base`` with the non-None ``overrides`` applied, validated like acme.toml."""
    values = {**base.to_dict(), **{k: v for k, v in overrides.items() if v is not None}}
    if "spool_dir" in values:
        values["spool_dir"] = str(values["spool_dir"])
    try:
        return TelemetryConfig.validate(values)
    except SectionError as exc:
        raise InputError(f"telemetry.{exc.field}: {exc.message} (got {exc.value!r})") from None


@dataclass(frozen=True)
class CollectorSettings:
    cluster: str
    node: str
    store_url: str | None
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    slurm_timeout_s: float = 10.0
    #: The drain policy, from the trusted system config only: a root-run collector
    #: drains its own node when its hardware events call for it.
    nodes: NodesConfig = field(default_factory=NodesConfig)

    @classmethod
    def build(cls, cluster: str, node: str, store_url: str | None, *,
              slurm_timeout_s: float = 10.0, **telemetry: Any) -> CollectorSettings:
        """Settings from built-in telemetry defaults plus ``telemetry`` overrides."""
        return cls(cluster, node, store_url, telemetry_with(TelemetryConfig(), **telemetry),
                   slurm_timeout_s)

    @classmethod
    def from_config(cls, config: AcmeConfig, *, node: str | None = None,
                    store_url: str | None = None, **overrides: Any) -> CollectorSettings:
        from slurm_acme.config import system_config

        return cls(cluster=config.cluster.name, node=node or default_node_name(),
                   store_url=store_url, telemetry=telemetry_with(config.telemetry, **overrides),
                   slurm_timeout_s=min(config.slurm.command_timeout_s, 10.0),
                   nodes=system_config().nodes)

    @property
    def spool_dir(self) -> Path:
        return Path(self.telemetry.spool_dir)

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

    @property
    def start_claim(self) -> Path:
        """The file a hook creates (O_EXCL) when it starts the collector, so
        concurrent hooks start one; the running collector removes it. The name
        is also written in the hook (slurm_acme/data/node/acme-hook)."""
        return self.node_dir / "collectd.starting"
