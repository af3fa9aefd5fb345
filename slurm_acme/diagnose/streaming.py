"""Live diagnosis: feed every rank's output as it happens, ask for a verdict any time.

The in-job supervisor calls :meth:`StreamingDiagnoser.feed` for each line
of each rank; ``sacme diagnose`` calls :meth:`feed_bytes` with big batches
read from a file. Both paths share one engine: lines are keyed with
``bytes.translate`` and counted in C, so a noise line costs a dictionary
lookup; only keys that pass the rule book's gates reach the regexes.
Memory is bounded (templates, key caches and events are capped).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from slurm_acme.diagnose.clock import stamp_of
from slurm_acme.diagnose.compressor import LogCompressor
from slurm_acme.diagnose.culprit import SRUN_EXIT, SrunExits, culprit_node
from slurm_acme.diagnose.lines import DIGITS_TO_ZERO, decode, split_prefixes
from slurm_acme.diagnose.model import Diagnosis, FailureEvent, unknown_diagnosis
from slurm_acme.diagnose.rootcause import BLOCK_LINES, HEADER, RootCauseBlock, select_root_cause
from slurm_acme.diagnose.rules import KeyVerdict, Rule, RuleBook

#: At most this many failure events are kept (the earliest ones win anyway).
MAX_EVENTS = 5_000
#: Approximate bytes of key caches ("cannot match", verdicts) before they are rebuilt.
MAX_CACHE_BYTES = 4 << 20
_ENTRY_OVERHEAD = 120
#: Evidence lines returned with a diagnosis.
MAX_EVIDENCE = 6
_LINE_CAP = 8_000
#: Recent lines that some multi-line rule's ``after`` pattern matched.
MAX_ANCHORS = 64


class StreamingDiagnoser:
    """Compress and diagnose a log as it streams in, across ranks."""

    def __init__(
        self,
        rulebook: RuleBook | None = None,
        *,
        compressor: LogCompressor | None = None,
        cases: Any = None,
        retrieval: bool = True,
        threshold: float | None = None,
        task_nodes: Mapping[int, str] | None = None,
    ) -> None:
        """``cases`` (a CaseIndex or labelled cases; None: the shipped corpus) are
        searched by :meth:`result` when no rule fires, unless ``retrieval`` is off.
        ``task_nodes`` is the step's task layout (global rank -> node name): the
        culprit of a rank's failure is the node that rank ran on."""
        from slurm_acme.diagnose.api import default_rulebook

        self.rulebook = rulebook if rulebook is not None else default_rulebook()
        self.task_nodes: dict[int, str] = dict(task_nodes or {})
        self.exits = SrunExits()
        self._anchors: deque[tuple[int, int | None, str]] = deque(maxlen=MAX_ANCHORS)
        self.cases = cases
        self.retrieval = retrieval
        self.threshold = threshold
        self.compressor = compressor if compressor is not None else LogCompressor()
        self.events: list[FailureEvent] = []
        self.block: RootCauseBlock | None = None
        self._block_open = False
        self._seq = 0
        self._boring: set[bytes] = set()
        self._verdicts: dict[bytes, KeyVerdict] = {}
        self._recorded: set[tuple[bytes, int, int | None]] = set()
        self._cache_bytes = 0
        self._candidate_lines: list[str] = []

    # -- feeding ------------------------------------------------------
    @property
    def lines_seen(self) -> int:
        return self._seq

    def feed(self, line: str, *, rank: int | None = None, node: str | None = None) -> None:
        """One line of one rank's output (rank/node as the supervisor knows them)."""
        raw = line.rstrip("\r\n").encode("utf-8", errors="replace")
        self.feed_bytes([raw], rank=rank, node=node)

    def feed_bytes(
        self,
        lines: Sequence[bytes],
        keys: Sequence[bytes] | None = None,
        *,
        rank: int | None = None,
        node: str | None = None,
    ) -> None:
        """A batch of raw lines (no newlines); ``keys`` may be passed precomputed."""
        if not lines:
            return
        if keys is None:
            keys = [line.translate(DIGITS_TO_ZERO) for line in lines]
        counts = Counter(keys)
        base = self._seq
        self._seq += len(lines)
        self.compressor.add_batch(lines, keys, counts, base)
        if self._block_open:
            self._continue_block(lines, 0)
        fresh = counts.keys() - self._boring
        if not fresh:
            return
        wanted: dict[bytes, KeyVerdict] = {}
        for key in fresh:
            verdict = self._verdict(key)
            if verdict is None or (self._once(verdict) and (key, -1, None) in self._recorded):
                self._remember_boring(key)
            else:
                wanted[key] = verdict
        if wanted:
            self._scan(lines, keys, wanted, base, rank, node)

    @staticmethod
    def _once(verdict: KeyVerdict) -> bool:
        """Whether the first line of this key says all its lines could say."""
        return not verdict.dynamic and not verdict.anchor and verdict.builtin is None

    def _verdict(self, key: bytes) -> KeyVerdict | None:
        verdict = self._verdicts.get(key)
        if verdict is None and key not in self._verdicts:
            text = decode(key[:_LINE_CAP])
            verdict = self.rulebook.verdict(text)
            builtin = "header" if HEADER in text else "srun" if SRUN_EXIT.search(text) else None
            if builtin is not None:
                verdict = replace(verdict or KeyVerdict(static=None, dynamic=()), builtin=builtin)
            self._verdicts[key] = verdict  # type: ignore[assignment]
            self._cache_bytes += len(key) + _ENTRY_OVERHEAD
        return verdict

    def _remember_boring(self, key: bytes) -> None:
        if self._cache_bytes > MAX_CACHE_BYTES:
            self._boring.clear()
            self._verdicts.clear()
            self._cache_bytes = 0
        self._boring.add(key)
        self._cache_bytes += len(key) + _ENTRY_OVERHEAD

    def _scan(
        self,
        lines: Sequence[bytes],
        keys: Sequence[bytes],
        wanted: dict[bytes, KeyVerdict],
        base: int,
        rank: int | None,
        node: str | None,
    ) -> None:
        rules = self.rulebook.rules
        for index, key in enumerate(keys):
            verdict = wanted.get(key)
            if verdict is None:
                continue
            seq = base + index
            text = decode(lines[index][:_LINE_CAP])
            if verdict.builtin == "header":
                self.block = RootCauseBlock(start_seq=seq, end_seq=seq + BLOCK_LINES, relay_rank=rank,
                                            relay_node=node)
                self._block_open = True
                self._continue_block(lines, index + 1)
                continue
            if verdict.builtin == "srun":
                self.exits.feed(text, seq)
            stream = rank if rank is not None else split_prefixes(text).rank
            window: tuple[int, str] | None = None
            rule_index = verdict.static
            for candidate in verdict.dynamic:
                rule = rules[candidate]
                if rule.compiled.search(text):
                    window = self._window_start(rule, seq, stream)
                    if rule.after_re is None or window is not None:
                        rule_index = candidate
                        break
                    window = None
            if verdict.anchor:
                self._anchors.append((seq, stream, text))
            if rule_index is None:
                continue
            marker = (key, -1 if rule_index == verdict.static else rule_index, rank)
            if marker in self._recorded or len(self.events) >= MAX_EVENTS:
                continue
            self._recorded.add(marker)
            if len(self._candidate_lines) < 200:
                self._candidate_lines.append(text)
            self._add_event(seq, rule_index, text, rank, node, window)
            if self._once(verdict) and rank is None:
                del wanted[key]
                self._remember_boring(key)

    def _window_start(self, rule: Rule, seq: int, stream: int | None) -> tuple[int, str] | None:
        """For a multi-line rule: the nearest line before ``seq`` (same rank, within
        ``window`` lines) that its ``after`` pattern matches."""
        if rule.after_re is None:
            return None
        for anchor_seq, anchor_stream, anchor_text in reversed(self._anchors):
            if (seq - rule.window <= anchor_seq < seq
                    and (stream is None or anchor_stream is None or stream == anchor_stream)
                    and rule.after_re.search(anchor_text)):
                return anchor_seq, anchor_text
        return None

    def _add_event(self, seq: int, rule_index: int, text: str, rank: int | None, node: str | None,
                   window: tuple[int, str] | None = None) -> None:
        if len(self.events) >= MAX_EVENTS:
            return
        origin = split_prefixes(text)
        rank = rank if rank is not None else origin.rank
        context: tuple[str, ...] = ()
        stamp = stamp_of(origin.body) or stamp_of(text)
        if window is not None:
            seq, first_line = window
            context = (first_line,)
            stamp = stamp_of(split_prefixes(first_line).body) or stamp_of(first_line) or stamp
        if node is None:
            node = origin.node if origin.node is not None else self.task_nodes.get(rank) if rank is not None else None
        self.events.append(FailureEvent(
            seq=seq, rule_index=rule_index, line=text, rank=rank, node=node, stamp=stamp, context=context,
        ))

    def _continue_block(self, lines: Sequence[bytes], start: int) -> None:
        assert self.block is not None
        for raw in lines[start:start + self.block.remaining]:
            if not self.block.feed(decode(raw[:_LINE_CAP])):
                self._block_open = False
                return
        self._block_open = self.block.remaining > 0

    # -- answers ------------------------------------------------------
    def result(self) -> Diagnosis:
        """The diagnosis so far: the rules, then (if on) the nearest labelled cases."""
        if not self.retrieval:
            return self.rule_result()
        from slurm_acme.diagnose.api import conclude

        return conclude(self, cases=self.cases, threshold=self.threshold)

    def rule_result(self) -> Diagnosis:
        """What the rules alone say (``unknown`` when none fired)."""
        chosen = select_root_cause(self.events, self.rulebook, self.block)
        if chosen is None:
            return unknown_diagnosis()
        event, others = chosen
        rule = self.rulebook.rules[event.rule_index]
        node = culprit_node(event, rule, self.rulebook, others=others, block=self.block,
                            exits=self.exits, task_nodes=self.task_nodes)
        evidence = tuple(dict.fromkeys([*event.lines, *(line for o in others for line in o.lines)]))[:MAX_EVIDENCE]
        return Diagnosis(
            category=rule.category, origin=rule.origin, action=rule.action, node=node,
            rule_id=rule.id, confidence=rule.confidence, evidence=evidence, source="rule",
        )

    def compressed_lines(self) -> list[str]:
        """The compressed log so far (noise dropped, repeats folded)."""
        return self.compressor.lines()

    def candidate_lines(self) -> list[str]:
        """Lines some rule recognised (at most 200), for retrieval and the LLM."""
        return list(self._candidate_lines)
