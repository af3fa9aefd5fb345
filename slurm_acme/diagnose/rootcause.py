"""Choosing the root cause among many failure lines from many ranks.

When one rank dies, the others report timeouts and remote errors minutes
later; the first failure observed is the cause, the rest are echoes.
torchelastic says so explicitly in its summary block::

    Root Cause (first observed failure):
    [0]:
      host      : node2
      rank      : 3 (local_rank: 3)
      exitcode  : 1 (pid: 4242)

:class:`RootCauseBlock` reads that block; :func:`select_root_cause` prefers
its rank, then the earliest event of the strongest kind (see
:class:`~slurm_acme.diagnose.rules.Rule`) by the lines' own timestamps where
they carry them and by line order otherwise. Rule order never decides
between two lines: a loose late pattern cannot beat an earlier specific one.
Only a generic wrapper is refined by the detail lines its rank printed right
after it (an NCCL error followed by "Last error: ... NVLink" is an NVLink error).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from slurm_acme.diagnose.lines import split_prefixes
from slurm_acme.diagnose.model import FailureEvent
from slurm_acme.diagnose.rules import RuleBook

HEADER = "Root Cause (first observed failure)"
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*?)\s*$")
#: Lines after the header that can belong to the block.
BLOCK_LINES = 16
#: How many lines after the earliest failure still count as the same incident.
INCIDENT_WINDOW = 10
#: A symptom (e.g. a SIGKILL) this many lines before the first echo (e.g. NCCL
#: timeouts of the survivors) is taken as what the echoes answer to.
ECHO_LOOKBACK = 500


@dataclass
class RootCauseBlock:
    """Fields of torchelastic's "Root Cause" block, filled line by line."""

    host: str | None = None
    rank: int | None = None
    exitcode: int | None = None
    remaining: int = BLOCK_LINES
    #: Line numbers the block spans: events on them are the failed rank's,
    #: whatever relay prefix printed them (torchelastic's rank numbering and
    #: srun's task ids need not agree).
    start_seq: int = -1
    end_seq: int = -1
    #: The relay prefix (srun task) the block's lines came through: under
    #: ``srun torchrun`` it is the failed rank's agent, whatever ``rank`` says.
    relay_rank: int | None = None
    #: The node the supervisor says the block's lines came from (torchrun's
    #: agents are not ranks, so it passes the node instead of a task).
    relay_node: str | None = None
    fields: dict[str, str] = field(default_factory=dict)

    def feed(self, line: str) -> bool:
        """Read one line after the header; False once the block is over."""
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        origin = split_prefixes(line)
        body = origin.body
        if self.relay_rank is None:
            self.relay_rank = origin.rank
        if body.strip().startswith("=") and self.fields:
            self.remaining = 0
            return False
        match = _FIELD.match(body)
        if match is None or match.group(1) in self.fields:
            return self.remaining > 0
        name, value = match.groups()
        self.fields[name] = value
        if name == "host" and value and value != "<N/A>":
            self.host = value.split()[0]
        elif name == "rank":
            number = re.match(r"-?[0-9]+", value)
            self.rank = int(number.group()) if number else None
        elif name == "exitcode":
            number = re.match(r"-?[0-9]+", value)
            self.exitcode = int(number.group()) if number else None
        return self.remaining > 0


def _same_stream(a: FailureEvent, b: FailureEvent) -> bool:
    return a.rank is None or b.rank is None or a.rank == b.rank


def _candidates(events: Sequence[FailureEvent], book: RuleBook) -> list[FailureEvent]:
    """The events that may hold the cause: primaries (first errors); else echoes
    (survivors' reports), unless a symptom shortly before the first echo
    explains them; else symptoms. A survivor's report never outranks a first error."""
    by_strength: dict[str, list[FailureEvent]] = {"primary": [], "echo": [], "secondary": []}
    for event in events:
        by_strength[book.rules[event.rule_index].strength].append(event)
    if by_strength["primary"]:
        return by_strength["primary"]
    if by_strength["echo"]:
        first_echo = min(by_strength["echo"], key=time_order(by_strength["echo"]))
        just_before = [e for e in by_strength["secondary"]
                       if first_echo.seq - ECHO_LOOKBACK <= e.seq <= first_echo.seq]
        return just_before or by_strength["echo"]
    return by_strength["secondary"]


def time_order(pool: Sequence[FailureEvent]) -> Callable[[FailureEvent], tuple[float, ...]]:
    """Sort key: the lines' own time when every event in ``pool`` carries one on
    the same clock, else arrival order. Ties at the same moment keep line order."""
    stamps = [e.stamp for e in pool]
    clocks = {s.clock for s in stamps if s is not None}
    if pool and None not in stamps and len(clocks) == 1:
        precise = all(s.precise for s in stamps if s is not None)

        def by_time(e: FailureEvent) -> tuple[float, ...]:
            assert e.stamp is not None
            return (e.stamp.seconds if precise else float(int(e.stamp.seconds)), e.seq)

        return by_time
    return lambda e: (e.seq,)


def _refined(first: FailureEvent, pool: Sequence[FailureEvent], book: RuleBook) -> FailureEvent:
    """A generic wrapper ("NCCL error in: ...") named more precisely by the
    detail lines its rank printed right after it ("Last error: ... NVLink"):
    the most specific rule (earliest in the book) among them wins."""
    if not book.rules[first.rule_index].generic:
        return first
    details = [
        e for e in pool
        if first.seq < e.seq <= first.seq + INCIDENT_WINDOW and _same_stream(first, e)
        and e.rule_index < first.rule_index
        and (e.stamp is None or first.stamp is None or e.stamp.same_moment(first.stamp))
    ]
    return min(details, key=lambda e: (e.rule_index, e.seq)) if details else first


def select_root_cause(
    events: Sequence[FailureEvent], book: RuleBook, block: RootCauseBlock | None
) -> tuple[FailureEvent, list[FailureEvent]] | None:
    """The root-cause event and the other events of its incident, or None.

    The earliest decisive event wins (see :func:`time_order`); rule order
    only picks which rule names a line, and a generic wrapper's own details
    may refine it (:func:`_refined`).
    """
    if not events:
        return None
    pool = _candidates(events, book)
    if block is not None and block.rank is not None:
        # Events are keyed by their outermost relay (srun's task); when the block
        # came through a relay that is not its rank (one torchrun agent per node),
        # the failed rank's lines are that relay's, not those of srun task <rank>.
        def of_stream(e: FailureEvent) -> bool:
            if block.relay_rank is not None:
                return e.rank == block.relay_rank
            if block.relay_node is not None:
                return e.node == block.relay_node
            return e.rank == block.rank

        of_rank = [e for e in pool if of_stream(e) or block.start_seq <= e.seq <= block.end_seq]
        pool = of_rank or pool
    if all(book.rules[e.rule_index].strength == "secondary" for e in pool):
        # Symptoms the run survived (routine fp16 overflows early on) are not
        # the cause; the latest new symptom is the one closest to the death.
        last = max(pool, key=time_order(pool))
        return last, sorted((e for e in pool if e is not last and e.seq >= last.seq - INCIDENT_WINDOW),
                            key=lambda e: e.seq)
    first = min(pool, key=time_order(pool))
    chosen = _refined(first, pool, book)
    incident = [
        e for e in pool
        if e is not chosen and first.seq <= e.seq <= first.seq + INCIDENT_WINDOW and _same_stream(first, e)
    ]
    return chosen, sorted(incident, key=lambda e: e.seq)
