"""Failure diagnosis: log compression, a rule book, retrieval, an optional LLM agent.

The supervisor's whole contract::

    from slurm_acme.diagnose import diagnose, Diagnosis, LogCompressor, RuleBook, StreamingDiagnoser

    verdict = diagnose(lines, task_nodes={0: "node1", 1: "node2"})   # -> Diagnosis(category, origin, action, node, ...)
    live = StreamingDiagnoser(RuleBook.load(site_files), task_nodes=layout)
    live.feed(line, rank=3, node="node2"); live.result(); live.compressed_lines()

The root cause is the earliest decisive event across ranks (the lines' own
timestamps where they carry them, line order otherwise); survivors' reports
never outrank a first error. ``verdict.node`` is the culprit: the node whose
rank failed first (from the line, srun's task exits, or ``task_nodes``, the
step's global rank -> node layout), or None when the log implicates no node;
a node that only reported a peer's failure is never named.

What a supervisor should do with ``verdict.action``: ``requeue`` (same nodes),
``requeue_exclude_node`` (exclude ``verdict.node`` when set), ``rollback`` (to
the last healthy checkpoint) or ``stop`` (a script or framework error that a
retry will not fix). An unrecognised failure is ``category="unknown"`` with
action ``requeue``: a retry is cheap next to a dead job nobody watches, and
the supervisor's restart limit bounds the cost if it is really a bug.

``result()`` uses the rules, then the nearest labelled cases (the shipped
corpus unless ``cases=`` is given; ``retrieval=False`` for rules only).
"""

from __future__ import annotations

from slurm_acme.diagnose.api import diagnose
from slurm_acme.diagnose.compressor import LogCompressor
from slurm_acme.diagnose.model import Diagnosis
from slurm_acme.diagnose.rules import RuleBook
from slurm_acme.diagnose.streaming import StreamingDiagnoser

__all__ = ["Diagnosis", "LogCompressor", "RuleBook", "StreamingDiagnoser", "diagnose"]
