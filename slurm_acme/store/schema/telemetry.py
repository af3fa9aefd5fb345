"""Node and GPU samples from the node collectors, and per-job summaries."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from slurm_acme.store.rollups import GPU_METRICS, NODE_METRICS, BinSpec
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
#: Retention on SQLite deletes by time; Postgres drops whole day partitions
#: instead and keeps only the unique key (see :mod:`slurm_acme.store.partitions`).
Index("ix_gpu_samples_ts", gpu_samples.c.ts)

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


def _metric_columns(specs: tuple[BinSpec, ...]) -> list[Column]:
    cols: list[Column] = []
    for m in specs:
        cols += [Column(f"{m.name}_n", BigInteger, nullable=False, default=0),
                 Column(f"{m.name}_sum", Float, nullable=False, default=0.0),
                 Column(f"{m.name}_hist", LargeBinary)]
    return cols


#: Hourly rollup of one GPU's samples while one job (``job_id`` ``''``: none)
#: held it: count, sum and fixed-bin histogram per metric
#: (:data:`slurm_acme.store.rollups.GPU_METRICS`). Built in the node spool as
#: samples are taken and sent whole (replacing) at every flush; kept forever.
gpu_hourly = Table(
    "gpu_hourly",
    metadata,
    Column("cluster", String(64), primary_key=True),
    Column("hour_ts", Float, primary_key=True),
    Column("node", String(128), primary_key=True),
    Column("gpu_index", Integer, primary_key=True),
    Column("job_id", String(64), primary_key=True),
    Column("samples", BigInteger, nullable=False, default=0),
    *_metric_columns(GPU_METRICS),
    #: Spool bookkeeping: 0 while this row's latest version is not central.
    Column("synced", Integer, nullable=False, default=0),
    sqlite_with_rowid=False,
)
#: ``--user``/``--type`` reports read the selected jobs' GPU-hours.
Index("ix_gpu_hourly_job", gpu_hourly.c.cluster, gpu_hourly.c.job_id)

#: Hourly rollup of one node's samples (:data:`~slurm_acme.store.rollups.NODE_METRICS`)
#: plus its GPUs' summed power and the sample instants that had GPU power,
#: whose ratio is the node's mean total GPU draw.
node_hourly = Table(
    "node_hourly",
    metadata,
    Column("cluster", String(64), primary_key=True),
    Column("hour_ts", Float, primary_key=True),
    Column("node", String(128), primary_key=True),
    Column("samples", BigInteger, nullable=False, default=0),
    Column("gpu_power_sum", Float, nullable=False, default=0.0),
    Column("gpu_power_ticks", BigInteger, nullable=False, default=0),
    *_metric_columns(NODE_METRICS),
    Column("synced", Integer, nullable=False, default=0),
    sqlite_with_rowid=False,
)

#: Per (cluster, hour, metric): the sum over every node of ``gpu_hourly`` and
#: ``node_hourly``, kept current by each flush (it adds the difference between
#: a node's new rollup row and the one it replaces). Whole-cluster reports read
#: only this: a month is 720 rows per metric whatever the site's size.
cluster_hourly = Table(
    "cluster_hourly",
    metadata,
    Column("cluster", String(64), primary_key=True),
    Column("hour_ts", Float, primary_key=True),
    Column("metric", String(16), primary_key=True),
    Column("n", BigInteger, nullable=False, default=0),
    Column("sum", Float, nullable=False, default=0.0),
    Column("hist", LargeBinary),
    #: Samples behind the row (GPU samples for GPU metrics, node samples for node metrics).
    Column("samples", BigInteger, nullable=False, default=0),
    sqlite_with_rowid=False,
)

ROLLUP_TABLES = (gpu_hourly, node_hourly, cluster_hourly)
