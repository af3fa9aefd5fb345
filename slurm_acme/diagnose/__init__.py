"""Failure diagnosis: log compression, a rule book, retrieval, an optional LLM agent.

The supervisor's whole contract::

    from slurm_acme.diagnose import diagnose, Diagnosis, LogCompressor, RuleBook, StreamingDiagnoser

    verdict = diagnose(lines)            # -> Diagnosis(category, origin, action, node, ...)
    live = StreamingDiagnoser(RuleBook.load(site_files))
    live.feed(line, rank=3, node="node2"); live.result(); live.compressed_lines()

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
