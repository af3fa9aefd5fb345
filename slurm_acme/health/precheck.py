"""Cheap node-local checks that can condemn a node before any pair test.

Each check looks at one boundary and returns ``ok``, ``bad`` or
``unavailable`` (no such hardware or library here: never a failure):

- GPU count: GPUs visible (NVML, narrowed by ``CUDA_VISIBLE_DEVICES``) versus
  GPUs allocated (``SLURM_GPUS_ON_NODE`` or ``--expect-gpus``);
- NVML memory health: volatile uncorrectable ECC errors, pending or failed
  row remapping (Ampere on), pages pending retirement (before Ampere);
- XID events in the kernel log that mean broken hardware (fell off the bus,
  double-bit ECC, NVLink errors, ...);
- InfiniBand: every port ACTIVE and ``counters/link_downed`` at most
  ``max_link_downed``, read from ``/sys/class/infiniband``.

The boundaries are parameters (an NVML module or fake, a sysfs root, kernel
log lines), so tests fake them and nothing else. Run as a module on each node
(``python -m slurm_acme.health.precheck``) it prints one JSON line.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import socket
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OK, BAD, UNAVAILABLE = "ok", "bad", "unavailable"

#: XIDs that mean the GPU or its links are broken (NVIDIA's XID catalogue):
#: 48 DBE, 62/63/64 row remap/page retire events, 74 NVLink, 79 fell off the
#: bus, 92 high SBE rate, 94/95 contained/uncontained ECC, 119/120 GSP errors.
CRITICAL_XIDS = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120})
_XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    status: str
    detail: str = ""


@dataclass(frozen=True)
class NodePrecheck:
    """Every check's outcome on one node."""

    node: str
    checks: tuple[CheckOutcome, ...]

    @property
    def bad(self) -> tuple[CheckOutcome, ...]:
        return tuple(c for c in self.checks if c.status == BAD)

    def to_json(self) -> str:
        return json.dumps({"node": self.node, "checks": [asdict(c) for c in self.checks]})

    @classmethod
    def from_json(cls, line: str) -> NodePrecheck:
        doc = json.loads(line)
        return cls(str(doc["node"]), tuple(CheckOutcome(**c) for c in doc.get("checks", ())))


# ------------------------------------------------------------------ GPU count

def visible_gpus(nvml: Any | None, environ: Mapping[str, str]) -> int | None:
    cvd = environ.get("CUDA_VISIBLE_DEVICES")
    if nvml is None:
        return None
    count = int(nvml.nvmlDeviceGetCount())
    if cvd is not None and cvd.strip() not in ("", "all"):
        return min(count, len([d for d in cvd.split(",") if d.strip()]))
    return count


def check_gpu_count(visible: int | None, allocated: int | None) -> CheckOutcome:
    """A node that shows fewer GPUs than Slurm gave the job has lost one."""
    if not allocated:
        return CheckOutcome("gpu_count", UNAVAILABLE, "no GPUs allocated on this node")
    if visible is None:
        return CheckOutcome("gpu_count", UNAVAILABLE, "NVML not available")
    if visible < allocated:
        return CheckOutcome("gpu_count", BAD, f"{visible} GPU(s) visible, {allocated} allocated")
    return CheckOutcome("gpu_count", OK, f"{visible} visible, {allocated} allocated")


# ----------------------------------------------------------------------- NVML

def load_nvml() -> tuple[Any | None, str]:
    """``pynvml`` initialised, or ``(None, why not)``."""
    try:
        import pynvml
    except ImportError:
        return None, "pynvml not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML not available: {exc}"
    return pynvml, ""


def check_nvml_memory(nvml: Any | None, why_not: str = "NVML not available") -> CheckOutcome:
    """Uncorrectable ECC, row remapping pending/failed, pages pending retirement."""
    if nvml is None:
        return CheckOutcome("nvml_memory", UNAVAILABLE, why_not)
    problems: list[str] = []
    supported = False
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        for probe in (_ecc_problem, _remap_problem, _retired_problem):
            answer = _ask(nvml, probe, handle)
            if answer is not None:
                supported = True
                if answer:
                    problems.append(f"GPU {index}: {answer}")
    if problems:
        return CheckOutcome("nvml_memory", BAD, "; ".join(problems))
    if not supported:
        return CheckOutcome("nvml_memory", UNAVAILABLE, "ECC and row remapping not supported")
    return CheckOutcome("nvml_memory", OK)


def _ask(nvml: Any, probe: Any, handle: Any) -> str | None:
    """A probe's finding ('' when healthy), or None when the GPU does not support it."""
    try:
        return probe(nvml, handle)
    except nvml.NVMLError:
        return None


def _ecc_problem(nvml: Any, handle: Any) -> str:
    count = nvml.nvmlDeviceGetTotalEccErrors(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                             nvml.NVML_VOLATILE_ECC)
    return f"{count} uncorrectable ECC error(s)" if count else ""


def _remap_problem(nvml: Any, handle: Any) -> str:
    _corr, unc, pending, failed = nvml.nvmlDeviceGetRemappedRows(handle)
    if failed:
        return "row remapping failed"
    if pending:
        return f"row remapping pending ({unc} uncorrectable row(s)); reset the GPU"
    return ""


def _retired_problem(nvml: Any, handle: Any) -> str:
    pending = nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
    return "retired pages pending; reset the GPU" if pending else ""


# ------------------------------------------------------------------------ XID

def read_kernel_log(driver_dir: Path = Path("/proc/driver/nvidia"),
                    kmsg: Path = Path("/dev/kmsg")) -> list[str] | None:
    """Kernel log lines (non-blocking read of ``/dev/kmsg``); None without a driver or access."""
    if not driver_dir.exists():
        return None
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    lines: list[str] = []
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten record: keep reading
                    continue
                break  # EAGAIN: no more records
            if not chunk:
                break
            lines.append(chunk.decode("utf-8", "replace"))
    finally:
        os.close(fd)
    return lines


def check_xid(kernel_log: Iterable[str] | None) -> CheckOutcome:
    """Critical XIDs in the kernel log since boot."""
    if kernel_log is None:
        return CheckOutcome("xid", UNAVAILABLE, "no NVIDIA driver or kernel log not readable")
    seen = [(m.group(1), int(m.group(2))) for line in kernel_log for m in _XID.finditer(line)]
    critical = [f"Xid {xid} on {pci}" for pci, xid in seen if xid in CRITICAL_XIDS]
    if critical:
        return CheckOutcome("xid", BAD, "; ".join(dict.fromkeys(critical)))
    return CheckOutcome("xid", OK, f"{len(seen)} non-critical Xid event(s)" if seen else "")


# ---------------------------------------------------------------- InfiniBand

def check_infiniband(sysfs: Path = Path("/sys"), max_link_downed: int = 0) -> CheckOutcome:
    """Every IB port ACTIVE (administratively disabled ones aside), link_downed low."""
    root = sysfs / "class" / "infiniband"
    ports = sorted(root.glob("*/ports/*")) if root.is_dir() else []
    if not ports:
        return CheckOutcome("infiniband", UNAVAILABLE, "no InfiniBand devices")
    problems = []
    for port in ports:
        name = f"{port.parent.parent.name}/{port.name}"
        state = _sysfs_word(port / "state")
        if "DISABLED" in _sysfs_word(port / "phys_state"):
            continue
        if state != "ACTIVE":
            problems.append(f"{name} state {state or 'unknown'}")
        downed = _sysfs_int(port / "counters" / "link_downed")
        if downed is not None and downed > max_link_downed:
            problems.append(f"{name} link_downed={downed}")
    if problems:
        return CheckOutcome("infiniband", BAD, "; ".join(problems))
    return CheckOutcome("infiniband", OK, f"{len(ports)} port(s) active")


def _sysfs_word(path: Path) -> str:
    """``"4: ACTIVE"`` -> ``"ACTIVE"``; '' when unreadable."""
    try:
        text = path.read_text().strip()
    except OSError:
        return ""
    return text.split(":", 1)[-1].strip().upper()


def _sysfs_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------ the node

def run_node_prechecks(*, node: str, nvml: Any | None, nvml_why_not: str,
                       kernel_log: Iterable[str] | None, sysfs: Path,
                       expect_gpus: int | None, environ: Mapping[str, str]) -> NodePrecheck:
    allocated = expect_gpus
    if allocated is None and environ.get("SLURM_GPUS_ON_NODE", "").isdigit():
        allocated = int(environ["SLURM_GPUS_ON_NODE"])
    checks = (
        check_gpu_count(visible_gpus(nvml, environ), allocated),
        check_nvml_memory(nvml, nvml_why_not),
        check_xid(kernel_log),
        check_infiniband(sysfs),
    )
    return NodePrecheck(node, checks)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m slurm_acme.health.precheck")
    p.add_argument("--expect-gpus", type=int, default=None)
    p.add_argument("--sysfs", type=Path, default=Path("/sys"))
    args = p.parse_args(argv)
    nvml, why_not = load_nvml()
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    result = run_node_prechecks(node=node, nvml=nvml, nvml_why_not=why_not,
                                kernel_log=read_kernel_log(), sysfs=args.sysfs,
                                expect_gpus=args.expect_gpus, environ=os.environ)
    print(result.to_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
