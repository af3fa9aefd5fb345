"""The node-health ledger: every infrastructure event that implicates a node,
and every drain or resume slurm-acme (or an admin through it) made."""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text, UniqueConstraint

from slurm_acme.store.schema.base import metadata

#: One row per event, whichever source saw it: a diagnosis naming a culprit
#: (``diagnosis``), a health check flagging the node (``health``), or the node's
#: own collector seeing a hardware event (``hardware``: an XID, an ECC
#: double-bit error, a row-remap failure, a GPU fallen off the bus).
node_events = Table(
    "node_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(64), nullable=False),
    Column("node", String(128), nullable=False),
    Column("ts", Float, nullable=False),
    Column("source", String(16), nullable=False),  # diagnosis / health / hardware
    Column("category", String(64), nullable=False),  # NVLinkError, ECCError, NodeFailure, XidError, ...
    #: What exactly was seen: ``xid:79``, ``ecc_dbe``, ``row_remap_failure``,
    #: ``gpu_lost``, or the diagnosis rule id.
    Column("code", String(128), nullable=False, default=""),
    Column("gpu_index", Integer),
    Column("job_id", String(64)),
    Column("run_id", String(64)),
    Column("failure_id", Integer),
    Column("evidence", Text),  # JSON list of lines
    Column("reporter", String(64)),  # the Unix user whose process wrote the row
    UniqueConstraint("cluster", "node", "ts", "source", "code", "gpu_index", name="uq_node_events"),
)
Index("ix_node_events_node_ts", node_events.c.cluster, node_events.c.node, node_events.c.ts)

#: Drains and resumes: what was done to a node, why, and by whom.
node_actions = Table(
    "node_actions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(64), nullable=False),
    Column("node", String(128), nullable=False),
    Column("ts", Float, nullable=False),
    Column("action", String(16), nullable=False),  # drain / resume
    Column("reason", Text),
    Column("by_user", String(64), nullable=False),
)
Index("ix_node_actions_node_ts", node_actions.c.cluster, node_actions.c.node, node_actions.c.ts)
