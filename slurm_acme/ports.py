"""Free TCP ports for rendezvous (training, health checks), chosen below the kernel's ephemeral range.

Why not ``bind(('', 0))``: the kernel hands that port back to its ephemeral pool
the moment the probe socket closes, and srun, slurmstepd and every outgoing
connection on the node draw from the same pool. Between the pick and the
trainer's ``listen`` one of them can take it: rank 0 then fails with
EADDRINUSE and the other ranks talk to srun's socket (seen in CI, an in-place
restart lost to it). Nothing is handed out automatically below the ephemeral
range, which is why torchrun's default port 29500 lives there too.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: Where the kernel's ephemeral range is published (Linux).
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: The lowest port we pick: above the well-known and registered services most sites run
#: (and the local test clusters' port bases, 17800-24300).
LOWEST = 25000
#: Random tries before falling back to a kernel-chosen port.
TRIES = 64


def ephemeral_range(path: Path = EPHEMERAL_RANGE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default when it cannot be read)."""
    try:
        low, high = (int(v) for v in path.read_text().split()[:2])
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def can_listen(port: int) -> bool:
    """True when nothing on this host holds ``port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def free_port(*, avoid: set[int] | frozenset[int] = frozenset(), rng: random.Random | None = None,
              range_path: Path = EPHEMERAL_RANGE) -> int:
    """A port free now, below the ephemeral range where one is free there; else the kernel's pick."""
    pick = rng or random.SystemRandom()
    top = ephemeral_range(range_path)[0] - 1
    if top - LOWEST >= TRIES:
        for _ in range(TRIES):
            port = pick.randint(LOWEST, top)
            if port not in avoid and can_listen(port):
                return port
    while True:  # a site whose ephemeral range starts low: the old way, but never a port we gave out
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        if port not in avoid:
            return port
