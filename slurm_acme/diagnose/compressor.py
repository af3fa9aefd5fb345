"""Streaming log compression: drop noise, fold repeated lines into templates.

A 1,000-GPU job prints the same line from every rank at every step; what a
person (or the LLM agent) needs is each distinct message once, where it first
and last happened, and how often. Lines are grouped by a cheap key (digits
zeroed, :data:`~slurm_acme.diagnose.lines.DIGITS_TO_ZERO`), then each new key is
masked once more precisely (hex, IPs, hosts, timestamps, numbers) into a
template. Memory is bounded by ``max_templates`` whatever the log size.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from slurm_acme.diagnose.lines import DIGITS_TO_ZERO, decode

#: Lines that are never evidence of a failure: progress bars and per-step logs.
#: They run case-insensitively on keys, where every digit is already ``0``.
DEFAULT_NOISE: tuple[str, ...] = (
    r"[\u2580-\u259f]",                                  # tqdm block characters
    r"\d+%\|",                                           # tqdm "45%|"
    r"\d+/\d+ \[\d+:\d+(:\d+)?<",                        # tqdm "381/2724 [14:04<85:52"
    r"\d+(\.\d+)?\s*(it/s|s/it)\b",
    r"^\W*(global[ _])?(iteration|iter|step|epoch)\b\s*[:=]?\s*\[?\d+.*\b(loss|lr|learning[ _]rate)\b",
    r"\b(loss|lr|learning[ _]rate|grad[ _]norm)\s*[:=]\s*[-+\d.e]+\s*(\||,|$)",
    r"^\s*[-=*#]{4,}\s*$",                               # separators
    r"^\s*$",
)

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d([.,]\d+)?(Z|[+-]\d\d:?\d\d)?"), "<TS>"),
    (re.compile(r"\b[A-Z][a-z]{2} +[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d( \d{4})?"), "<TS>"),
    (re.compile(r"\b[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d\b"), "<TS>"),
    (re.compile(r"\b\d\d:\d\d:\d\d([.,]\d+)?\b"), "<TS>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<HEX>"),
    (re.compile(r"\b(\d+\.){3}\d+(:\d+|<\d+>)?"), "<IP>"),
    (re.compile(r"\b[0-9a-f]*\d[0-9a-f]*[a-f][0-9a-f]*\b|\b[0-9a-f]*[a-f][0-9a-f]*\d[0-9a-f]*\b"), "<HEX>"),
    (re.compile(r"(?<![\w.-])[A-Za-z][\w.-]*\d[\w.-]*(?=:\d+:\d+ \[)"), "<HOST>"),
    (re.compile(r"\b(node|host|gpu|nid|cn)[-_]?\d+\b", re.IGNORECASE), "<HOST>"),
    (re.compile(r"\d+(\.\d+)?([eE][-+]?\d+)?"), "<N>"),
)

#: Longest line kept verbatim; the rest of a longer line is cut.
MAX_LINE_CHARS = 2000
#: Key cache size (approximate bytes) before it is dropped and rebuilt.
MAX_KEY_CACHE_BYTES = 4 << 20
#: Approximate bytes a cache entry costs beyond its key.
ENTRY_OVERHEAD = 120
_NOISE_TID = -1
_OVERFLOW_TID = -2


def template_of(text: str) -> str:
    """``text`` with the variable parts masked: the identity of a message."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text[:MAX_LINE_CHARS]


@dataclass
class _Template:
    first_seq: int
    first: str
    count: int = 0
    last_seq: int = -1
    last: str = ""


@dataclass
class CompressionStats:
    lines_in: int = 0
    noise_lines: int = 0
    overflow_lines: int = 0
    templates: int = 0
    lines_out: int = 0

    @property
    def ratio(self) -> float:
        """Input lines per output line (1.0 for an empty log)."""
        return self.lines_in / self.lines_out if self.lines_out else float(self.lines_in or 1)


@dataclass
class LogCompressor:
    """Fold a stream of log lines into first/last occurrences per template.

    Feed it line by line (:meth:`add`) or in batches of raw bytes
    (:meth:`add_batch`, the fast path for files). :meth:`lines` renders the
    compressed log in arrival order; :attr:`ratio` is lines in per line out.
    """

    noise: Sequence[str] = DEFAULT_NOISE
    max_templates: int = 10_000
    _noise_re: re.Pattern[str] = field(init=False, repr=False)
    _key_tid: dict[bytes, int] = field(default_factory=dict, repr=False)
    _key_bytes: int = field(default=0, repr=False)
    _tid: dict[str, int] = field(default_factory=dict, repr=False)
    _templates: list[_Template] = field(default_factory=list, repr=False)
    _seq: int = field(default=0, repr=False)
    stats: CompressionStats = field(default_factory=CompressionStats)

    def __post_init__(self) -> None:
        self._noise_re = re.compile("|".join(f"(?:{p})" for p in self.noise) or r"(?!x)x", re.IGNORECASE)

    def add(self, line: str) -> None:
        """Compress one line (live feeding)."""
        raw = line.rstrip("\r\n").encode("utf-8", errors="replace")
        key = raw.translate(DIGITS_TO_ZERO)
        self.add_batch([raw], [key], Counter((key,)), self._seq)

    def add_batch(
        self, lines: Sequence[bytes], keys: Sequence[bytes], counts: Counter[bytes], base_seq: int
    ) -> None:
        """Compress a batch; ``keys[i]`` is ``lines[i]`` translated, ``counts`` their Counter."""
        self._seq = base_seq + len(lines)
        self.stats.lines_in += len(lines)
        new_keys = [k for k in counts if k not in self._key_tid]
        if new_keys:
            firsts = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=False))
            for key in new_keys:
                self._classify(key, lines[firsts[key]], base_seq + firsts[key])
        lasts: dict[bytes, int] | None = None
        for key, count in counts.items():
            tid = self._key_tid.get(key, _OVERFLOW_TID)
            if tid == _NOISE_TID:
                self.stats.noise_lines += count
                continue
            if tid == _OVERFLOW_TID:
                self.stats.overflow_lines += count
                continue
            template = self._templates[tid]
            template.count += count
            if template.count > 1:
                if lasts is None:
                    lasts = dict(zip(keys, range(len(keys)), strict=False))
                index = lasts[key]
                if base_seq + index > max(template.last_seq, template.first_seq):
                    template.last_seq = base_seq + index
                    template.last = decode(lines[index][: MAX_LINE_CHARS * 4])[:MAX_LINE_CHARS]

    def _classify(self, key: bytes, first_line: bytes, seq: int) -> None:
        if self._key_bytes > MAX_KEY_CACHE_BYTES:
            self._key_tid.clear()
            self._key_bytes = 0
        self._key_bytes += len(key) + ENTRY_OVERHEAD
        text = decode(key[: MAX_LINE_CHARS * 4])
        if self._noise_re.search(text):
            self._key_tid[key] = _NOISE_TID
            return
        template = template_of(text)
        tid = self._tid.get(template)
        if tid is None:
            if len(self._templates) >= self.max_templates:
                self._key_tid[key] = _OVERFLOW_TID
                return
            tid = len(self._templates)
            self._tid[template] = tid
            line = decode(first_line[: MAX_LINE_CHARS * 4])[:MAX_LINE_CHARS]
            self._templates.append(_Template(first_seq=seq, first=line))
        self._key_tid[key] = tid

    def entries(self) -> list[tuple[int, str]]:
        """(seq, rendered line) of every kept line, in arrival order."""
        out: list[tuple[int, str]] = []
        for t in self._templates:
            if t.count == 0:
                continue
            out.append((t.first_seq, t.first))
            if t.count > 1 and t.last_seq >= 0:
                out.append((t.last_seq, f"{t.last}  [x{t.count}]"))
        out.sort(key=lambda item: item[0])
        return out

    def lines(self) -> list[str]:
        """The compressed log: first and last occurrence of each template, with counts."""
        rendered = [text for _, text in self.entries()]
        if self.stats.noise_lines:
            rendered.append(f"[{self.stats.noise_lines} noise lines (progress, per-step logs) dropped]")
        if self.stats.overflow_lines:
            rendered.append(f"[{self.stats.overflow_lines} lines of further templates dropped]")
        return rendered

    @property
    def ratio(self) -> float:
        self.stats.templates = len(self._templates)
        self.stats.lines_out = len(self.lines())
        return self.stats.ratio
