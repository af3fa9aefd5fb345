"""Rendezvous ports come from below the kernel's ephemeral range, and are free when picked."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from slurm_acme.ports import LOWEST, can_listen, ephemeral_range, free_port


def test_ports_are_picked_below_this_hosts_ephemeral_range():
    low, _ = ephemeral_range()
    ports = {free_port() for _ in range(200)}
    assert all(LOWEST <= p < low for p in ports)
    assert all(can_listen(p) for p in ports)


class Draws(random.Random):
    """A random source that draws the given ports in order (the test decides the collisions)."""

    def __init__(self, ports: list[int]) -> None:
        super().__init__(0)
        self.ports = list(ports)

    def randint(self, a: int, b: int) -> int:
        return self.ports.pop(0)


def test_a_port_someone_listens_on_is_skipped():
    taken = next(p for p in range(LOWEST + 1000, LOWEST + 2000) if can_listen(p))
    with socket.socket() as listener:
        listener.bind(("", taken))
        listener.listen()
        other = next(p for p in range(taken + 1, taken + 1000) if can_listen(p))
        assert free_port(rng=Draws([taken, other])) == other


def test_a_port_given_out_before_is_skipped():
    first = next(p for p in range(LOWEST + 3000, LOWEST + 4000) if can_listen(p))
    second = next(p for p in range(first + 1, first + 1000) if can_listen(p))
    assert free_port(avoid={first}, rng=Draws([first, second])) == second


def test_ports_given_out_are_avoided(tmp_path: Path):
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text(f"{LOWEST + 80}\t60999\n")
    given: set[int] = set()
    for _ in range(40):
        given.add(free_port(avoid=given, range_path=ranges))
    assert len(given) == 40


def test_a_range_that_starts_low_falls_back_to_the_kernels_pick(tmp_path: Path):
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("1024\t65000\n")
    port = free_port(range_path=ranges)
    assert 1024 <= port <= 65535 and can_listen(port)


def test_an_unreadable_range_means_linuxs_default(tmp_path: Path):
    assert ephemeral_range(tmp_path / "missing") == (32768, 60999)
