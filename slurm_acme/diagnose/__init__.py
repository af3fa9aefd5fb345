"""Failure diagnosis: log compression, a rule book, retrieval, an optional LLM agent.

The supervisor's whole contract::

    from slurm_acme.diagnose import diagnose, Diagnosis, LogCompressor, RuleBook, StreamingDiagnoser

    verdict = diagnose(lines)            # -> Diagnosis(category, origin, action, node, ...)
    live = StreamingDiagnoser(RuleBook.load(site_files))
    live.feed(line, rank=3, node="node2"); live.result(); live.compressed_lines()
"""

from __future__ import annotations

from slurm_acme.diagnose.api import diagnose
from slurm_acme.diagnose.compressor import LogCompressor
from slurm_acme.diagnose.model import Diagnosis
from slurm_acme.diagnose.rules import RuleBook
from slurm_acme.diagnose.streaming import StreamingDiagnoser

__all__ = ["Diagnosis", "LogCompressor", "RuleBook", "StreamingDiagnoser", "diagnose"]
