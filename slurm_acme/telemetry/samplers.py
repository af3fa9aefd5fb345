"""The sampler interface and the list a collector runs, built from its settings."""

from __future__ import annotations

from typing import Protocol

from slurm_acme.telemetry.dcgm import DcgmSampler
from slurm_acme.telemetry.host import HostSampler
from slurm_acme.telemetry.infiniband import InfinibandSampler
from slurm_acme.telemetry.ipmi import IpmiSampler
from slurm_acme.telemetry.nvml import NvmlSampler
from slurm_acme.telemetry.records import Reading
from slurm_acme.telemetry.settings import CollectorSettings
from slurm_acme.telemetry.synthetic import SyntheticGpuSampler


class Sampler(Protocol):
    name: str

    def probe(self) -> str | None:
        """None when the hardware is there; otherwise why this sampler is skipped."""

    def sample(self, busy: dict[int, str]) -> Reading:
        """One reading; ``busy`` maps GPU index -> job id (the synthetic sampler uses it)."""

    def close(self) -> None: ...


def build_samplers(settings: CollectorSettings) -> list[Sampler]:
    """GPU samplers first (NVML, then DCGM fills profiling fields), then node samplers.

    With ``synthetic_gpus`` set, the synthetic sampler replaces NVML and DCGM:
    the two must never mix on one node.
    """
    t = settings.telemetry
    wanted = t.samplers
    out: list[Sampler] = []
    if t.synthetic_gpus:
        out.append(SyntheticGpuSampler(t.synthetic_gpus, settings.node))
    else:
        if "nvml" in wanted:
            out.append(NvmlSampler())
        if "dcgm" in wanted:
            out.append(DcgmSampler(t.sensor_timeout_s))
    if "host" in wanted:
        out.append(HostSampler())
    if "ipmi" in wanted:
        out.append(IpmiSampler(t.sensor_timeout_s))
    if "infiniband" in wanted:
        out.append(InfinibandSampler())
    return out
