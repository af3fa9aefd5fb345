"""Bin packing shared by the planner and the simulator's OpenCompass baseline."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def first_fit_decreasing(items: Iterable[T], size: Callable[[T], float], cap: float) -> list[list[T]]:
    """Largest first, each into the first bin it fits under ``cap`` (an item larger than
    ``cap`` gets a bin of its own). Stable: equal sizes keep their input order."""
    bins: list[list[T]] = []
    loads: list[float] = []
    for item in sorted(items, key=lambda it: -size(it)):
        for i, load in enumerate(loads):
            if load + size(item) <= cap:
                bins[i].append(item)
                loads[i] += size(item)
                break
        else:
            bins.append([item])
            loads.append(size(item))
    return bins
