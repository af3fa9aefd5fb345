"""Node power from the BMC over DCMI: ``ipmitool dcmi power reading`` or FreeIPMI's
``ipmi-dcmi --get-system-power-statistics``, whichever is installed."""

from __future__ import annotations

import os
import re

from slurm_acme.telemetry.records import Reading, checked
from slurm_acme.telemetry.sensors import find_binary, run_sensor

_CURRENT = re.compile(r"^\s*(?:Instantaneous power reading|Current Power)\s*:\s*(\S+)\s*watts",
                      re.IGNORECASE | re.MULTILINE)
_STATE = re.compile(r"^\s*(?:Power reading state is|Power Measurement)\s*:\s*(.+?)\s*$",
                    re.IGNORECASE | re.MULTILINE)
_ACTIVE = {"activated", "active"}


def parse_dcmi_power(text: str) -> tuple[float | None, list[str]]:
    """Current node power (W) from either tool's output, and data-quality flags.

    Both tools print the reading state; a BMC that says the measurement is not
    active prints a meaningless number, which is dropped and flagged.
    """
    flags: list[str] = []
    state = _STATE.search(text)
    if state and state.group(1).strip().lower() not in _ACTIVE:
        return None, ["ipmi_inactive"]
    current = _CURRENT.search(text)
    if not current:
        return None, ["garbage:node_power_w"]
    return checked(current.group(1), "node_power_w", flags), flags


class IpmiSampler:
    """Reads node power through whichever DCMI tool exists, in-band (/dev/ipmi0)."""

    name = "ipmi"

    def __init__(self, timeout: float, device: str = "/dev/ipmi0") -> None:
        self.timeout = timeout
        self.device = device
        self.argv: list[str] | None = None

    def probe(self) -> str | None:
        if not os.path.exists(self.device):
            return f"no BMC device {self.device}"
        tool = find_binary("ipmitool")
        if tool:
            self.argv = [tool, "dcmi", "power", "reading"]
            return None
        tool = find_binary("ipmi-dcmi")
        if tool:
            self.argv = [tool, "--get-system-power-statistics"]
            return None
        return "neither ipmitool nor ipmi-dcmi is installed"

    def sample(self, busy: dict[int, str]) -> Reading:
        assert self.argv is not None
        out = run_sensor(self.argv, timeout=self.timeout)
        if not out.ok:
            return Reading(flags=[f"ipmi_{out.problem}"])
        watts, flags = parse_dcmi_power(out.text)
        return Reading(node={"node_power_w": watts}, flags=flags)

    def close(self) -> None:
        return None
