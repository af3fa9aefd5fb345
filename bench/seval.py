"""Trial coordinator vs one-job-per-dataset baseline, simulated in the paper's setting.

A 7B model (14 GB) on the 63 shipped datasets, 1 and 4 nodes of 8 GPUs, a
25 Gb/s storage NIC per node, PCIe loads from node-local memory. The
baseline is calibrated to the paper's breakdown (29.5 % loading and
preprocessing, 19 % metric computation); see slurm_acme/evaluate/simulate.py.
Prints one JSON object; targets: speedup >= 1.3 (1 node), >= 1.8 (4 nodes),
coordinator within 10 % of the lower bound. Each run also reports a second
baseline, OpenCompass's default size partitioner (tasks of <= 40,000 cost
units, each still a job that loads the model remotely and scores in place).
"""

from __future__ import annotations

import json

from slurm_acme.evaluate.priors import DEFAULT_HEURISTIC
from slurm_acme.evaluate.registry import load_registry
from slurm_acme.evaluate.simulate import paper_scenario


def main() -> None:
    datasets = load_registry(include_tiny=False).select("all")
    result = paper_scenario(datasets, DEFAULT_HEURISTIC, nodes=(1, 4))
    targets = {1: 1.3, 4: 1.8}
    result["targets_met"] = all(
        run["speedup"] >= targets[run["nodes"]] and run["gap_to_lower_bound"] <= 0.10
        for run in result["runs"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
