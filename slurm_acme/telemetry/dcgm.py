"""DCGM profiling fields (SM, tensor and DRAM activity) through ``dcgmi dmon``.

These are the fields NVML cannot give: NVML's "utilisation" only says a kernel
ran, while the paper's SM-activity findings need DCGM's ratios.
"""

from __future__ import annotations

from slurm_acme.telemetry.records import Reading, checked
from slurm_acme.telemetry.sensors import find_binary, run_sensor

#: DCGM field id -> (dmon column, our gpu_samples column). Values are ratios 0..1.
FIELDS = {1002: ("SMACT", "sm_active"), 1004: ("TENSO", "tensor_active"),
          1005: ("DRAMA", "dram_active")}
_COLUMNS = {column: ours for column, ours in FIELDS.values()}


def parse_dmon(text: str) -> Reading:
    """The last value of each known column per GPU from ``dcgmi dmon`` output.

    dmon prints a ``#Entity`` header, an ``ID`` line, then rows such as
    ``GPU 0  0.888  N/A``; ``N/A`` is "no value" (not an error), anything else
    that is not a number is flagged as garbage.
    """
    reading = Reading()
    header: list[str] | None = None
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0].startswith("#"):
            header = [w for w in words if not w.startswith("#")]
            continue
        if header is None or words[0] != "GPU" or len(words) < 2 or not words[1].isdigit():
            continue
        index = int(words[1])
        gpu = reading.gpus.setdefault(index, {})
        flags: list[str] = []
        for column, raw in zip(header, words[2:], strict=False):
            ours = _COLUMNS.get(column)
            if ours is None:
                continue
            value = None if raw == "N/A" else checked(raw, ours, flags)
            if value is not None and value > 1.0:
                flags.append(f"garbage:{ours}")
                value = None
            if value is not None or ours not in gpu:
                gpu[ours] = value
        if flags:
            gpu.setdefault("flags", []).extend(flags)
    if header is None:
        reading.flags.append("dcgm_garbage")
    return reading


class DcgmSampler:
    """One ``dcgmi dmon -c 1`` per tick (nv-hostengine keeps the watches warm)."""

    name = "dcgm"

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.argv: list[str] | None = None

    def probe(self) -> str | None:
        tool = find_binary("dcgmi")
        if not tool:
            return "dcgmi is not installed"
        self.argv = [tool, "dmon", "-e", ",".join(str(f) for f in FIELDS), "-c", "1"]
        return None

    def sample(self, busy: dict[int, str]) -> Reading:
        assert self.argv is not None
        out = run_sensor(self.argv, timeout=self.timeout)
        if not out.ok:
            return Reading(flags=[f"dcgm_{out.problem}"])
        return parse_dmon(out.text)

    def close(self) -> None:
        return None
