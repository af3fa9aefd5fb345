"""Decoupled evaluation scheduling (the paper's Trial Coordinator, s6.2).

registry (datasets, groups) -> priors (per dataset and model size) -> planner
(a pure function: shards, trials, slots) -> submitter (a frozen Slurm plan:
preload per node, GPU trial arrays, CPU scoring arrays, aggregate, cleanup)
-> worker steps in the jobs -> results and measured runtimes in the store.
"""
