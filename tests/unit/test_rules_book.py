"""The rule book: loading, layering, validation, grep compatibility, the gates."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_acme.diagnose.corpus import load_corpus
from slurm_acme.diagnose.rules import RuleBook, shipped_rules_path
from slurm_acme.diagnose.streaming import StreamingDiagnoser
from slurm_acme.errors import InputError

REPO = Path(__file__).resolve().parents[2]


def test_etc_copy_and_package_data_are_the_same_file():
    assert (REPO / "etc" / "acme" / "rules.yaml").read_text() == shipped_rules_path().read_text()


def test_shipped_book_loads_with_valid_fields():
    book = RuleBook.load()
    assert len(book) > 30
    assert {r.origin for r in book.rules} <= {"infrastructure", "framework", "script"}
    assert {r.action for r in book.rules} <= {"requeue", "requeue_exclude_node", "rollback", "stop"}


def test_every_shipped_regex_compiles():
    # The shipped book compiles its regexes on first use; this is where a bad one shows.
    for rule in RuleBook.load().rules:
        rule.check()
        assert rule.compiled.pattern == rule.pattern


def test_a_site_rule_with_a_bad_node_regex_is_refused_at_load(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("rules:\n  - {id: a, pattern: 'x', node: '(', category: C, origin: script, action: stop}\n")
    with pytest.raises(InputError, match="bad regex"):
        RuleBook.load([path])


def test_hardware_rules_come_before_generic_cuda_errors():
    ids = [r.id for r in RuleBook.load().rules]
    generic = ids.index("cuda-error-generic")
    for specific in ("gpu-ecc-uncorrectable", "gpu-xid-ecc", "nvlink-xid", "gpu-fallen-off-bus", "cuda-device-side-assert"):
        assert ids.index(specific) < generic


def test_site_rules_sit_on_top_replace_by_id_and_disable(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(
        "prefilter: [GPFS]\n"
        "disable: [py-value-error]\n"
        "rules:\n"
        "  - {id: site-gpfs, pattern: 'GPFS [a-z]+ unmounted', category: StorageError, origin: infrastructure, action: requeue_exclude_node}\n"
        "  - {id: py-key-error, pattern: 'KeyError', category: ConfigKeyMissing, origin: script, action: stop}\n"
    )
    book = RuleBook.load([site])
    ids = [r.id for r in book.rules]
    assert ids[0] == "site-gpfs"
    assert "py-value-error" not in ids
    shipped = [r.id for r in RuleBook.load().rules]
    at = ids.index("py-key-error")
    assert ids[at - 1] == shipped[shipped.index("py-key-error") - 1]  # replaced in place
    from slurm_acme.diagnose import diagnose

    assert diagnose(["mmfs: GPFS filesystem unmounted"], rulebook=book).rule_id == "site-gpfs"
    assert diagnose(["KeyError: 'x'"], rulebook=book).category == "ConfigKeyMissing"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rules:\n  - {id: a, pattern: 'x', category: C, origin: cloud, action: stop}\n", "origin 'cloud'"),
        ("rules:\n  - {id: a, pattern: 'x', category: C, origin: script, action: retry}\n", "action 'retry'"),
        ("rules:\n  - {id: a, pattern: '(', category: C, origin: script, action: stop}\n", "bad regex"),
        ("rules:\n  - {id: a, pattern: 'x', category: C, origin: script, action: stop, colour: red}\n", "unknown field 'colour'"),
        ("rules:\n  - {id: a, category: C, origin: script, action: stop}\n", "missing field 'pattern'"),
        ("prefilter: [Xid79]\n", "digit-free"),
        ("rules: [\n", "malformed YAML"),
        ("rulez: []\n", "unknown field 'rulez'"),
    ],
)
def test_bad_rule_files_name_file_and_field(tmp_path, text, message):
    path = tmp_path / "site.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=re.escape(message)) as info:
        RuleBook.load([path])
    assert str(path) in str(info.value)


def test_missing_site_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="rule file not found"):
        RuleBook.load([tmp_path / "absent.yaml"])


def corpus_lines() -> list[str]:
    return sorted({line for case in load_corpus() for line in case.text.splitlines() if line.strip()})


@pytest.mark.skipif(shutil.which("grep") is None, reason="grep is part of every supported system")
def test_every_pattern_means_the_same_to_grep_E(tmp_path):
    lines = corpus_lines()
    data = tmp_path / "lines.txt"
    data.write_text("\n".join(lines) + "\n")
    for rule in RuleBook.load().rules:
        proc = subprocess.run(["grep", "-E", "-n", "-e", rule.pattern, str(data)],
                              capture_output=True, text=True, check=False,
                              env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"})
        assert proc.returncode in (0, 1), f"{rule.id}: grep rejects the pattern: {proc.stderr}"
        by_grep = {int(row.split(":", 1)[0]) - 1 for row in proc.stdout.splitlines()}
        by_python = {i for i, line in enumerate(lines) if rule.compiled.search(line)}
        assert by_grep == by_python, f"{rule.id}: grep and Python disagree"


def engine_rule(book: RuleBook, line: str) -> str | None:
    live = StreamingDiagnoser(book)
    live.feed(line)
    return book.rules[live.events[0].rule_index].id if live.events else None


def test_gated_engine_agrees_with_plain_matching_on_every_corpus_line():
    book = RuleBook.load()
    for line in corpus_lines():
        plain = book.match(line)
        assert engine_rule(book, line) == (plain[1].id if plain else None), line


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_digit_changes_never_fool_the_key_gates(data):
    """Lines that differ only in digits share a key; each must still get its own rule."""
    book = RuleBook.load()
    lines = [line for line in corpus_lines() if re.search(r"[0-9]", line)]
    line = data.draw(st.sampled_from(lines))
    seed = data.draw(st.integers(0, 10_000))
    rng = random.Random(seed)
    mutated = re.sub(r"[0-9]", lambda _: str(rng.randrange(10)), line)
    live = StreamingDiagnoser(book)
    live.feed(line)
    live.feed(mutated)
    got = {book.rules[e.rule_index].id for e in live.events}
    want = {m[1].id for m in (book.match(line), book.match(mutated)) if m}
    assert got == want
