"""Which node to blame: the one whose rank failed first, never a mere reporter.

Evidence of *where* a failure happened comes from, in order of trust:
a node the matching line names as failed ("Node failure on node7"); for
faults seen locally (``culprit: reporter`` rules), the node that printed the
line (NCCL's ``host:pid:tid`` prefix, a ``host:`` relay prefix, the node the
supervisor says the rank runs on, the step's task layout); torchelastic's
"Root Cause" block; and srun's report of the first task that exited.

Survivors that report a dead peer (``culprit: named``) blame nobody unless
the line names the peer, or srun reports the reporter's own task as the first
that failed: excluding a survivor would evict a healthy node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_acme.diagnose.model import FailureEvent
from slurm_acme.diagnose.rootcause import RootCauseBlock
from slurm_acme.diagnose.rules import Rule, RuleBook

#: ``srun: error: node3: task 5: Exited with exit code 1`` (also ``tasks 0-3,7:``).
SRUN_EXIT = re.compile(
    r"srun: error: (?P<node>[A-Za-z0-9][A-Za-z0-9_.-]*): tasks? (?P<tasks>[0-9][0-9,-]*): (?P<what>.+?)\s*$")
#: What srun reports for the tasks it killed itself once one had failed.
_VICTIM = re.compile(r"^(Killed|Terminated)$")


def expand_tasks(spec: str) -> list[int]:
    """``0-2,5`` -> [0, 1, 2, 5] (bounded: a huge range is cut)."""
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit():
            continue
        end = int(hi) if hi.isdigit() else int(lo)
        out.extend(range(int(lo), min(end, int(lo) + 4096) + 1))
    return out


@dataclass
class SrunExits:
    """srun's task exit reports, in the order srun printed them."""

    layout: dict[int, str] = field(default_factory=dict)
    first_failed: tuple[int, str, tuple[int, ...]] | None = None
    first_any: tuple[int, str, tuple[int, ...]] | None = None

    def feed(self, line: str, seq: int) -> bool:
        match = SRUN_EXIT.search(line)
        if match is None:
            return False
        node, tasks = match.group("node"), tuple(expand_tasks(match.group("tasks")))
        for task in tasks:
            self.layout.setdefault(task, node)
        entry = (seq, node, tasks)
        if self.first_any is None:
            self.first_any = entry
        if self.first_failed is None and not _VICTIM.match(match.group("what")):
            self.first_failed = entry
        return True

    @property
    def first(self) -> tuple[int, str, tuple[int, ...]] | None:
        return self.first_failed or self.first_any


def culprit_node(
    event: FailureEvent,
    rule: Rule,
    book: RuleBook,
    *,
    others: Sequence[FailureEvent] = (),
    block: RootCauseBlock | None = None,
    exits: SrunExits | None = None,
    task_nodes: Mapping[int, str] | None = None,
) -> str | None:
    """The node ``event`` implicates, or None when the log implicates none."""
    if rule.culprit == "none":
        return None
    same_rank = [o for o in others if o.rank == event.rank]
    texts = [*event.lines, *(line for o in same_rank for line in o.lines)]
    for text in texts:
        named = book.named_node(rule, text)
        if named:
            return named
    if rule.culprit == "named":
        # A primary cause (not an echo such as a watchdog timeout) is blamed on
        # its reporter only when srun says the reporter's own task failed first:
        # then it did not outlive a peer, it is the one that went down.
        first = exits.first_failed if exits else None
        if rule.strength == "primary" and first is not None and event.rank is not None and event.rank in first[2]:
            return first[1]
        return None
    for text in texts:
        reporter = book.reporter_node(text)
        if reporter:
            return reporter
    if event.node:
        return event.node
    layout = {**(exits.layout if exits else {}), **(task_nodes or {})}
    if event.rank is not None and event.rank in layout:
        return layout[event.rank]
    if block is not None and block.host and (block.rank is None or event.rank is None or block.rank == event.rank):
        return block.host
    if event.rank is None and exits is not None and exits.first is not None:
        return exits.first[1]
    return None
