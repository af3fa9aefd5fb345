"""The rule book: ordered regex rules that turn a log line into a diagnosis.

Rules live in YAML (the shipped ``rules.yaml`` plus site files layered on
top), ordered specific-before-generic: the first rule whose ``pattern``
matches a line names it. Patterns are written in the subset of regex syntax
that Python ``re`` and POSIX ``grep -E`` agree on, so admins can grep with
them and the benchmark can compare against grep fairly.

Speed comes from two gates that let most lines cost one dictionary lookup:
the ``prefilter`` keywords (a line with none of them matches no rule) and
the fact that a pattern without digit literals matches a line exactly when
it matches the line's digits-zeroed key (see :mod:`slurm_acme.diagnose.lines`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from slurm_acme.diagnose.model import ACTIONS, ORIGINS
from slurm_acme.errors import InputError

STRENGTHS = ("primary", "echo", "secondary")
#: Whose node a matching line blames. ``reporter``: the node that printed it
#: (a GPU or NIC fault seen locally). ``named``: only a node the line names as
#: failed (survivors reporting a peer, Slurm naming a failed node); never the
#: reporter. ``none``: no node (a time limit, a preemption).
CULPRITS = ("reporter", "named", "none")
RULE_KEYS = {"id", "pattern", "category", "origin", "action", "node", "strength", "confidence", "note",
             "keywords", "culprit", "generic", "after", "window", "ignore_case"}
#: Keywords the diagnoser itself needs to see (torchelastic's summary block, srun's task exits).
BUILTIN_KEYWORDS = ("Root Cause", "srun: error:")
#: Lines before a multi-line rule's line that its ``after`` pattern may match, by default.
DEFAULT_WINDOW = 4
MAX_WINDOW = 20


def shipped_rules_path() -> Path:
    """``rules.yaml`` inside the installed package (also ``etc/acme/rules.yaml``)."""
    return Path(str(resources.files("slurm_acme") / "data" / "rules.yaml"))


def _digit_gate(pattern: str) -> str | None:
    """The pattern with digit literals zeroed, to test against a key; None if unsafe."""
    if re.search(r"\{[^}]*[0-9]|\\[0-9]", pattern):
        return None
    return re.sub(r"[1-9]", "0", pattern)  # "0-9" ranges become "0-0": still right on keys


@dataclass(frozen=True)
class Rule:
    """One failure signature.

    ``strength`` says how much a match proves. ``primary``: this is a cause.
    ``echo``: what survivors report when a peer dies (NCCL timeouts, remote
    errors, lost rendezvous); a cause only if no primary fired. ``secondary``:
    a symptom or a bare signal (fp16 overflow, a SIGKILL); decides only when
    nothing stronger fired, or just before the first echo.
    """

    id: str
    pattern: str
    category: str
    origin: str
    action: str
    node: str | None = None
    strength: str = "primary"
    confidence: float = 0.95
    note: str = ""
    #: Extra prefilter keywords (digit-free literals) lines of this rule contain.
    keywords: tuple[str, ...] = ()
    culprit: str = "reporter"
    #: A wrapper ("NCCL error in: ...", "CUDA error: ...") that the detail
    #: lines right after it, from the same rank, may name more precisely.
    generic: bool = False
    #: Multi-line rule: a regex one of the ``window`` lines before this one must match.
    after: str | None = None
    window: int = DEFAULT_WINDOW
    ignore_case: bool = False
    #: Pattern without digit literals: matching the key is matching the line.
    digit_free: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A multi-line rule depends on the lines before: never decided by the key alone.
        digit_free = re.search(r"[0-9]", self.pattern.replace("0-9", "")) is None and not self.after
        object.__setattr__(self, "digit_free", digit_free)

    # The regexes are compiled on first use: a book of a hundred rules costs
    # ~50 ms of re.compile, while a log usually reaches a handful of them
    # (``sacme diagnose`` on a short log pays start-up, not matching).
    # :func:`parse_rule` compiles them up front where a file may be wrong.
    @property
    def _flags(self) -> int:
        return re.IGNORECASE if self.ignore_case else 0

    @functools.cached_property
    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern, self._flags)

    @functools.cached_property
    def node_re(self) -> re.Pattern[str] | None:
        return re.compile(self.node) if self.node else None

    @functools.cached_property
    def after_re(self) -> re.Pattern[str] | None:
        return re.compile(self.after, self._flags) if self.after else None

    @functools.cached_property
    def gate(self) -> re.Pattern[str] | None:
        """The pattern to test a line's digits-zeroed key with (None: no gate)."""
        gate = self.pattern if re.search(r"[0-9]", self.pattern.replace("0-9", "")) is None \
            else _digit_gate(self.pattern)
        return re.compile(gate, self._flags) if gate is not None else None

    def check(self) -> None:
        """Compile every regex now, so a bad one raises ``re.error`` here, not mid-log."""
        for name in ("compiled", "node_re", "after_re", "gate"):
            getattr(self, name)

    def to_dict(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in ("id", "pattern", "category", "origin", "action")}
        for key, default in (("node", None), ("strength", "primary"), ("note", ""), ("keywords", ()),
                             ("culprit", "reporter"), ("generic", False), ("after", None),
                             ("window", DEFAULT_WINDOW), ("ignore_case", False)):
            if getattr(self, key) != default:
                data[key] = list(self.keywords) if key == "keywords" else getattr(self, key)
        return data


def parse_rule(data: Any, source: str, *, compile_now: bool = True) -> Rule:
    """Validate one rule mapping; errors name the file, rule and field.

    ``compile_now=False`` leaves the regexes to first use: only for the shipped
    book, which the unit tests compile whole (a site file's bad regex is
    reported at load, naming the file).
    """
    if not isinstance(data, dict):
        raise InputError(f"{source}: each rule must be a mapping, got {data!r}")
    rid = data.get("id", "?")
    unknown = set(data) - RULE_KEYS
    if unknown:
        raise InputError(f"{source}: rule {rid!r}: unknown field {min(unknown)!r} "
                         f"(valid: {', '.join(sorted(RULE_KEYS))})")
    for key in ("id", "pattern", "category", "origin", "action"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise InputError(f"{source}: rule {rid!r}: missing field {key!r}")
    if data["origin"] not in ORIGINS:
        raise InputError(f"{source}: rule {rid!r}: origin {data['origin']!r} is not one of {', '.join(ORIGINS)}")
    if data["action"] not in ACTIONS:
        raise InputError(f"{source}: rule {rid!r}: action {data['action']!r} is not one of {', '.join(ACTIONS)}")
    strength = data.get("strength", "primary")
    if strength not in STRENGTHS:
        raise InputError(f"{source}: rule {rid!r}: strength {strength!r} is not one of {', '.join(STRENGTHS)}")
    confidence = data.get("confidence", {"primary": 0.95, "echo": 0.85, "secondary": 0.6}[strength])
    keywords = data.get("keywords") or []
    digit_free = all(isinstance(k, str) and k and not re.search(r"[0-9]", k) for k in keywords or ())
    if not isinstance(keywords, list) or not digit_free:
        raise InputError(f"{source}: rule {rid!r}: keywords must be a list of non-empty digit-free strings")
    culprit = data.get("culprit", "named" if strength == "echo" else "reporter")
    if culprit not in CULPRITS:
        raise InputError(f"{source}: rule {rid!r}: culprit {culprit!r} is not one of {', '.join(CULPRITS)}")
    after = data.get("after")
    if after is not None and (not isinstance(after, str) or not after
                              or re.search(r"[0-9]", after.replace("0-9", ""))):
        raise InputError(f"{source}: rule {rid!r}: after must be a digit-free regex (use [0-9])")
    window = data.get("window", DEFAULT_WINDOW)
    if not isinstance(window, int) or isinstance(window, bool) or not 1 <= window <= MAX_WINDOW:
        raise InputError(f"{source}: rule {rid!r}: window must be a whole number of lines from 1 to {MAX_WINDOW}")
    for flag in ("generic", "ignore_case"):
        if not isinstance(data.get(flag, False), bool):
            raise InputError(f"{source}: rule {rid!r}: {flag} must be true or false")
    try:
        rule = Rule(
            id=data["id"], pattern=data["pattern"], category=data["category"], origin=data["origin"],
            action=data["action"], node=data.get("node"), strength=strength,
            confidence=float(confidence), note=str(data.get("note", "")), keywords=tuple(keywords),
            culprit=culprit, generic=bool(data.get("generic", False)), after=after, window=window,
            ignore_case=bool(data.get("ignore_case", False)),
        )
        if compile_now:
            rule.check()
        return rule
    except re.error as exc:
        raise InputError(f"{source}: rule {rid!r}: bad regex: {exc}") from None
    except (TypeError, ValueError, OverflowError) as exc:  # e.g. confidence: "high", node: [1]
        raise InputError(f"{source}: rule {rid!r}: bad value: {exc}") from None


@dataclass(frozen=True)
class RuleFile:
    """What one YAML file contributes."""

    rules: tuple[Rule, ...]
    prefilter: tuple[str, ...] = ()
    node_patterns: tuple[str, ...] = ()
    disable: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    reporter_patterns: tuple[str, ...] = ()


def parse_rule_file(text: str, source: str, *, compile_now: bool = True) -> RuleFile:
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: malformed YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        return RuleFile(rules=())
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping with a 'rules' list")
    valid = {"version", "rules", "prefilter", "node_patterns", "reporter_patterns", "disable", "ignore"}
    unknown = set(data) - valid
    if unknown:
        raise InputError(f"{source}: unknown field {min(unknown)!r} (valid: {', '.join(sorted(valid))})")
    rules = data.get("rules") or []
    if not isinstance(rules, list):
        raise InputError(f"{source}: 'rules' must be a list")
    for key in ("prefilter", "ignore", "node_patterns", "reporter_patterns", "disable"):
        if not isinstance(data.get(key) or [], list):
            raise InputError(f"{source}: {key!r} must be a list")
    prefilter = tuple(str(k) for k in data.get("prefilter") or ())
    for keyword in prefilter:
        if re.search(r"[0-9]", keyword) or not keyword:
            raise InputError(f"{source}: prefilter keyword {keyword!r} must be non-empty and digit-free")
    ignore = tuple(str(p) for p in data.get("ignore") or ())
    for pattern in ignore:
        if re.search(r"[0-9]", pattern.replace("0-9", "")):
            raise InputError(f"{source}: ignore pattern {pattern!r} must be digit-free (use [0-9])")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InputError(f"{source}: ignore pattern {pattern!r}: bad regex: {exc}") from None
    node_patterns = tuple(str(p) for p in data.get("node_patterns") or ())
    reporter_patterns = tuple(str(p) for p in data.get("reporter_patterns") or ())
    for pattern in (*node_patterns, *reporter_patterns):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InputError(f"{source}: node pattern {pattern!r}: bad regex: {exc}") from None
    return RuleFile(
        rules=tuple(parse_rule(r, source, compile_now=compile_now) for r in rules), prefilter=prefilter,
        node_patterns=node_patterns, disable=tuple(str(d) for d in data.get("disable") or ()),
        ignore=ignore, reporter_patterns=reporter_patterns,
    )


def read_rule_file(path: str | Path, *, compile_now: bool = True) -> RuleFile:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: rule file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read rule file: {exc}") from None
    return parse_rule_file(text, str(path), compile_now=compile_now)


@dataclass(frozen=True)
class KeyVerdict:
    """What the rules can say about every line sharing one digits-zeroed key.

    ``static`` is the first digit-free rule that matches (valid for all such
    lines); ``dynamic`` are earlier rules with digit literals whose gate
    matched, to be tried on each raw line.
    """

    static: int | None
    dynamic: tuple[int, ...]
    #: Some multi-line rule's ``after`` pattern matches: remember each such line.
    anchor: bool = False
    #: A line the engine reads itself: ``header`` (torchelastic's root-cause
    #: block) or ``srun`` (srun's task exit report).
    builtin: str | None = None


@dataclass(frozen=True)
class RuleBook:
    """An ordered, immutable list of rules and the gates derived from them."""

    rules: tuple[Rule, ...]
    prefilter: tuple[str, ...] = ()
    #: Regexes naming a node *as failed* (group ``node``): "Node failure on X".
    node_patterns: tuple[str, ...] = ()
    #: Regexes naming the node that *printed* a line (NCCL's ``host:pid:tid`` prefix,
    #: syslog's host): the culprit only for rules whose ``culprit`` is ``reporter``.
    reporter_patterns: tuple[str, ...] = ()
    #: Lines that are never evidence, whatever they mention (e.g. NCCL INFO chatter).
    ignore: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    _prefilter_re: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _ignore_re: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _node_res: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _reporter_res: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _anchor_re: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids = [r.id for r in self.rules]
        duplicate = next((i for i in ids if ids.count(i) > 1), None)
        if duplicate:
            raise InputError(f"rule id {duplicate!r} is defined twice in {', '.join(self.sources) or 'the rule book'}")
        own = {k for rule in self.rules for k in rule.keywords}
        keywords = sorted(set(self.prefilter) | own | set(BUILTIN_KEYWORDS), key=len, reverse=True)
        # Case-insensitive: it runs once per distinct line key, not per line.
        object.__setattr__(self, "_prefilter_re",
                           re.compile("|".join(re.escape(k) for k in keywords), re.IGNORECASE))
        object.__setattr__(self, "_node_res", tuple(re.compile(p) for p in self.node_patterns))
        object.__setattr__(self, "_reporter_res", tuple(re.compile(p) for p in self.reporter_patterns))
        anchors = "|".join(f"(?:{r.after})" for r in self.rules if r.after)
        object.__setattr__(self, "_anchor_re", re.compile(anchors, re.IGNORECASE) if anchors else None)
        ignore = "|".join(f"(?:{p})" for p in self.ignore)
        object.__setattr__(self, "_ignore_re", re.compile(ignore) if ignore else None)

    # -- construction -------------------------------------------------
    @classmethod
    def from_files(cls, files: Sequence[tuple[str, RuleFile]]) -> RuleBook:
        """Layer rule files: later files sit on top (checked first); a rule
        with an existing id replaces it in place; ``disable`` drops ids."""
        rules: list[Rule] = []
        prefilter: list[str] = []
        node_patterns: list[str] = []
        reporter_patterns: list[str] = []
        ignore: list[str] = []
        for _source, rule_file in files:
            disabled = set(rule_file.disable)
            by_id = {r.id: r for r in rule_file.rules}
            rules = [by_id.pop(r.id, r) for r in rules if r.id not in disabled]
            rules = [r for r in rule_file.rules if r.id in by_id] + rules
            prefilter.extend(rule_file.prefilter)
            ignore.extend(rule_file.ignore)
            node_patterns = list(rule_file.node_patterns) + node_patterns
            reporter_patterns = list(rule_file.reporter_patterns) + reporter_patterns
        return cls(
            rules=tuple(rules), prefilter=tuple(dict.fromkeys(prefilter)),
            node_patterns=tuple(dict.fromkeys(node_patterns)),
            reporter_patterns=tuple(dict.fromkeys(reporter_patterns)), ignore=tuple(dict.fromkeys(ignore)),
            sources=tuple(s for s, _ in files),
        )

    @classmethod
    def load(cls, site_files: Iterable[str | Path] = ()) -> RuleBook:
        """The shipped rule book with each site file layered on top, in order."""
        shipped = shipped_rules_path()
        files = [(str(shipped), read_rule_file(shipped, compile_now=False))]
        files += [(str(p), read_rule_file(p)) for p in site_files]
        return cls.from_files(files)

    def with_rules(self, extra: Sequence[Rule], *, on_top: bool = False) -> RuleBook:
        """A new book with ``extra`` rules appended (or placed first)."""
        rules = (*extra, *self.rules) if on_top else (*self.rules, *extra)
        return replace(self, rules=tuple(rules))

    # -- matching -----------------------------------------------------
    def passes_prefilter(self, text: str) -> bool:
        return self._prefilter_re.search(text) is not None

    def ignored(self, text: str) -> bool:
        return self._ignore_re is not None and self._ignore_re.search(text) is not None

    def match(self, line: str, before: Sequence[str] = ()) -> tuple[int, Rule] | None:
        """The first rule matching ``line`` (no prefilter), as (index, rule);
        ``before`` are the lines just before it, for multi-line rules."""
        if self.ignored(line):
            return None
        for index, rule in enumerate(self.rules):
            if rule.compiled.search(line):
                if rule.after_re is not None and not any(
                        rule.after_re.search(b) for b in before[-rule.window:]):
                    continue
                return index, rule
        return None

    def is_anchor(self, text: str) -> bool:
        """Whether some multi-line rule's ``after`` pattern matches ``text``."""
        return self._anchor_re is not None and self._anchor_re.search(text) is not None

    def verdict(self, key_text: str) -> KeyVerdict | None:
        """What the rules say about lines with this key; None: nothing can match."""
        if not self._prefilter_re.search(key_text) or self.ignored(key_text):
            return None
        anchor = self.is_anchor(key_text)
        dynamic: list[int] = []
        for index, rule in enumerate(self.rules):
            if rule.gate is not None and not rule.gate.search(key_text):
                continue
            if rule.digit_free:
                return KeyVerdict(static=index, dynamic=tuple(dynamic), anchor=anchor)
            dynamic.append(index)
        if not dynamic and not anchor:
            return None
        return KeyVerdict(static=None, dynamic=tuple(dynamic), anchor=anchor)

    @staticmethod
    def _host(patterns: Iterable[re.Pattern[str]], line: str) -> str | None:
        for pattern in patterns:
            match = pattern.search(line)
            if match:
                groups = match.groupdict()
                host = groups.get("node") or (match.group(1) if match.re.groups else None)
                if host:
                    return host
        return None

    def named_node(self, rule: Rule, line: str) -> str | None:
        """A host ``line`` names as failed: the rule's node pattern, then the book's."""
        return self._host(((rule.node_re,) if rule.node_re else ()) + self._node_res, line)

    def reporter_node(self, line: str) -> str | None:
        """The host that printed ``line``, as far as its text says."""
        return self._host(self._reporter_res, line)

    def __len__(self) -> int:
        return len(self.rules)
