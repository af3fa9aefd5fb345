"""Running an external sensor command (ipmitool, ipmi-dcmi, dcgmi) safely.

A sensor that hangs or dies must cost the collector one flag, never a tick:
every command runs with a timeout and its failure comes back as a value.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SensorOutput:
    """stdout of a sensor command, or the reason there is none (``problem``)."""

    text: str = ""
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def run_sensor(argv: Sequence[str], *, timeout: float) -> SensorOutput:
    """Run ``argv`` with a timeout; never raises for the command's own failures."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        return SensorOutput(problem="missing")
    except subprocess.TimeoutExpired:
        return SensorOutput(problem="timeout")
    except OSError as exc:
        return SensorOutput(problem=f"oserror:{exc.errno}")
    if proc.returncode != 0:
        return SensorOutput(text=proc.stdout, problem=f"rc={proc.returncode}")
    return SensorOutput(text=proc.stdout)


def find_binary(name: str) -> str | None:
    """Absolute path of a sensor tool; /usr/sbin is searched even when not on PATH."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
