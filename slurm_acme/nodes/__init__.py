"""Node health: which nodes leave the pool, and why (the drain policy over the ledger).

The ledger itself lives in :mod:`slurm_acme.store.nodes`; Slurm is reached only
through :mod:`slurm_acme.slurm`. :mod:`.policy` is pure (histories and node
states in, a plan out); :mod:`.reconcile` carries a plan out as root.
"""
