"""One node's share of a job summary, from SQL aggregates of its spooled samples."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def node_share(agg: Mapping[str, Any], *, start: float | None, end: float, interval_s: float,
               has_gpus: bool) -> dict[str, Any]:
    """Sums, counts, energies, covered seconds and data-quality flags for ``job_nodes``.

    Energy is the mean observed power times the walltime, so a missed tick
    does not bias it low; the missed tick shows up as lower coverage instead.
    """
    flags: list[str] = []
    if start is None:
        flags.append("no_start_mark")
        walltime = 0.0
    else:
        walltime = max(0.0, end - start)
    if walltime < 2 * interval_s or agg["n_node_samples"] < 2:
        flags.append("too_short")
    if has_gpus and agg["n_gpu_samples"] == 0:
        flags.append("no_gpu_samples")
    if agg["bad_values"]:
        flags.append("sentinel_values")
    if agg["node_power_n"] == 0:
        flags.append("no_node_power")
    if agg.get("gpu_source") == "synthetic":
        flags.append("synthetic")
    gpu_energy = (agg["gpu_power_sum"] / agg["gpu_ticks"] * walltime
                  if agg["gpu_ticks"] and agg["gpu_power_sum"] is not None else None)
    node_energy = (agg["node_power_sum"] / agg["node_power_n"] * walltime
                   if agg["node_power_n"] else None)
    return {
        "n_gpu_samples": agg["n_gpu_samples"], "n_node_samples": agg["n_node_samples"],
        "gpu_util_sum": agg["gpu_util_sum"], "gpu_util_n": agg["gpu_util_n"],
        "gpu_util_max": agg["gpu_util_max"], "sm_active_sum": agg["sm_active_sum"],
        "sm_active_n": agg["sm_active_n"], "sm_active_max": agg["sm_active_max"],
        "gpu_mem_sum": agg["gpu_mem_sum"], "gpu_mem_n": agg["gpu_mem_n"],
        "gpu_mem_max": agg["gpu_mem_max"], "gpu_energy_j": gpu_energy,
        "node_energy_j": node_energy,
        "covered_s": min(walltime, agg["n_node_samples"] * interval_s),
        "flags": ",".join(flags),
    }
