"""Node and GPU samples from the node collectors, and per-job summaries."""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text, UniqueConstraint

from slurm_acme.store.schema.base import metadata

node_samples = Table(
    "node_samples",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(64), nullable=False),
    Column("node", String(128), nullable=False),
    Column("ts", Float, nullable=False),
    Column("job_ids", Text),  # comma-separated jobs running on the node then
    Column("cpu_percent", Float),
    Column("mem_percent", Float),
    Column("mem_used_bytes", Float),
    Column("node_power_w", Float),
    Column("ib_rx_bytes", Float),
    Column("ib_tx_bytes", Float),
    Column("flags", String(200)),
    UniqueConstraint("cluster", "node", "ts"),
)
Index("ix_node_samples_ts", node_samples.c.ts)

gpu_samples = Table(
    "gpu_samples",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(64), nullable=False),
    Column("node", String(128), nullable=False),
    Column("ts", Float, nullable=False),
    Column("gpu_index", Integer, nullable=False),
    Column("gpu_uuid", String(64)),
    Column("job_id", String(64)),
    Column("util_percent", Float),
    #: DCGM profiling ratios, 0..1 (not percent): SM, tensor-pipe and DRAM activity.
    Column("sm_active", Float),
    Column("tensor_active", Float),
    Column("dram_active", Float),
    Column("mem_used_bytes", Float),
    Column("mem_total_bytes", Float),
    Column("power_w", Float),
    Column("temp_c", Float),
    Column("ecc_dbe", Integer),
    Column("xid", Integer),
    Column("source", String(16)),  # nvml / dcgm / synthetic
    Column("flags", String(200)),
    UniqueConstraint("cluster", "node", "ts", "gpu_index"),
)
Index("ix_gpu_samples_ts", gpu_samples.c.ts)
Index("ix_gpu_samples_job", gpu_samples.c.job_id)

#: One row per (job, node): the prolog mark (start, GPU mapping), the epilog mark
#: (end, exit code) and, once the job ended there, that node's share of the job
#: summary as sums and counts so node shares combine into exact job means.
job_nodes = Table(
    "job_nodes",
    metadata,
    Column("cluster", String(64), primary_key=True),
    Column("job_id", String(64), primary_key=True),
    Column("node", String(128), primary_key=True),
    Column("user", String(64)),
    Column("start_ts", Float),
    Column("end_ts", Float),
    Column("exit_code", Integer),
    Column("gpu_indices", Text),  # comma-separated, as Slurm allocated them on this node
    Column("gpu_uuids", Text),  # comma-separated, where the collector knows them
    Column("n_gpu_samples", Integer),
    Column("n_node_samples", Integer),
    Column("gpu_util_sum", Float),
    Column("gpu_util_n", Integer),
    Column("gpu_util_max", Float),
    Column("sm_active_sum", Float),
    Column("sm_active_n", Integer),
    Column("sm_active_max", Float),
    Column("gpu_mem_sum", Float),
    Column("gpu_mem_n", Integer),
    Column("gpu_mem_max", Float),
    Column("gpu_energy_j", Float),
    Column("node_energy_j", Float),
    Column("covered_s", Float),
    Column("flags", Text),
    #: Spool bookkeeping: 0 until this row's latest version reached the central store.
    Column("synced", Integer, nullable=False, default=0),
)
Index("ix_job_nodes_open", job_nodes.c.node, job_nodes.c.end_ts)

#: Written once per job (and node set) at job end by the collector's flush.
job_summaries = Table(
    "job_summaries",
    metadata,
    Column("cluster", String(64), primary_key=True),
    Column("job_id", String(64), primary_key=True),
    Column("start_ts", Float),
    Column("end_ts", Float),
    Column("exit_code", Integer),
    Column("nodes", Text),
    Column("user", String(64)),
    Column("gpus", Integer),
    Column("gpu_util_mean", Float),
    Column("gpu_util_max", Float),
    Column("sm_active_mean", Float),
    Column("sm_active_max", Float),
    Column("gpu_mem_mean_bytes", Float),
    Column("gpu_mem_max_bytes", Float),
    Column("gpu_energy_j", Float),
    Column("node_energy_j", Float),
    Column("coverage", Float),
    Column("n_gpu_samples", Integer),
    Column("n_node_samples", Integer),
    Column("flags", Text),
)
