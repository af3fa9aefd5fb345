"""Every parser of outside input either parses or raises the project's input error.

Property-based (hypothesis): random text, random documents, and real inputs
(fixtures, the shipped examples) mutated at random. A parser that raises
anything else (TypeError, KeyError, RecursionError, ...) turns a bad file into
a traceback; this is what these tests catch. Bounded: 200 examples each (set
``ACME_FUZZ_EXAMPLES`` to search longer), derandomized so CI sees the same
cases every run.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import tomllib
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_acme.config import load_config, parse_config
from slurm_acme.diagnose.lines import decode, split_prefixes
from slurm_acme.diagnose.rules import parse_rule_file
from slurm_acme.errors import ConfigError, InputError
from slurm_acme.ft.spec import parse_spec
from slurm_acme.ingest.trace import COLUMNS, RowConverter, check_header
from slurm_acme.slurm.errors import SlurmParseError
from slurm_acme.slurm.parse import (
    expand_hostlist,
    gpu_indices_on,
    parse_job_gpu_groups,
    parse_sacct_exit_codes,
    parse_sacct_json,
    parse_sbatch_parsable,
    parse_scontrol_show_config,
    parse_scontrol_show_job,
    parse_scontrol_show_node,
    parse_sinfo_nodes,
    parse_squeue_json,
)

REPO = Path(__file__).resolve().parents[2]
SLURM = REPO / "tests" / "fixtures" / "slurm"
FUZZ = settings(max_examples=int(os.environ.get("ACME_FUZZ_EXAMPLES", "200")), deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FEW = settings(FUZZ, max_examples=max(10, FUZZ.max_examples // 5))

# ------------------------------------------------------------ strategies

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True), st.text(max_size=40))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=12), inner, max_size=6)), max_leaves=30)
nasty_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=400)


@st.composite
def mutated(draw, original: str, max_edits: int = 6) -> str:
    """``original`` with a few random insertions, deletions and replacements."""
    text = original
    for _ in range(draw(st.integers(min_value=1, max_value=max_edits))):
        at = draw(st.integers(min_value=0, max_value=max(0, len(text))))
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.text(min_size=1, max_size=8))
        if kind == "insert":
            text = text[:at] + piece + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + len(piece):]
        else:
            text = text[:at] + piece + text[at + len(piece):]
    return text


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) into a JSON document."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


@st.composite
def json_leaf_swapped(draw, doc: object) -> object:
    """``doc`` with a few values, at any depth, replaced by random JSON values."""
    doc = json.loads(json.dumps(doc))
    paths = _paths(doc)[1:]
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        path = paths[draw(st.integers(min_value=0, max_value=len(paths) - 1))]
        parent = doc
        try:
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1]] = draw(json_values)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier swap replaced this path's parent
    return doc


def _fixtures(pattern: str) -> list[Path]:
    found = sorted(SLURM.rglob(pattern))
    assert found, pattern
    return found


# ------------------------------------------------------------ train.yaml

SPEC = (REPO / "examples" / "train.yaml").read_text()


def _spec_parses_or_input_error(text: str, overrides: list[str] | None = None) -> None:
    try:
        parse_spec(text, "train.yaml", overrides)
    except InputError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(nasty_text)
def test_train_yaml_random_text(text):
    _spec_parses_or_input_error(text)


@FUZZ
@given(mutated(SPEC))
def test_train_yaml_mutated_example(text):
    _spec_parses_or_input_error(text)


@FUZZ
@given(st.dictionaries(st.sampled_from(["name", "nodes", "command", "checkpoint", "env", "fault_tolerance",
                                        "workdir", "partition", "time", "diagnosis", "gpus_per_node"]),
                       json_values, max_size=8))
def test_train_yaml_random_documents(doc):
    _spec_parses_or_input_error(yaml.safe_dump(doc))


@FUZZ
@given(st.lists(st.text(max_size=30), max_size=4))
def test_train_yaml_random_overrides(overrides):
    _spec_parses_or_input_error(SPEC, overrides)


# ------------------------------------------------------------ acme.toml

EXAMPLE_TOML = (REPO / "etc" / "acme" / "acme.toml.example").read_text()


def _config_loads_or_config_error(text: str) -> None:
    fd, name = tempfile.mkstemp(suffix=".toml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)
        load_config(name)
    except ConfigError as exc:
        assert "\n" not in str(exc).strip() or "malformed TOML" in str(exc)
    finally:
        os.unlink(name)


@FUZZ
@given(mutated(EXAMPLE_TOML))
def test_acme_toml_mutated_example(text):
    _config_loads_or_config_error(text)


@FUZZ
@given(st.dictionaries(st.sampled_from(["store", "cluster", "slurm", "telemetry", "report", "diagnosis",
                                        "evaluate", "files", "other"]),
                       st.one_of(json_values, st.dictionaries(st.text(max_size=20), json_values, max_size=5)),
                       max_size=5))
def test_acme_toml_random_documents(doc):
    try:
        parse_config(doc, "acme.toml")
    except ConfigError as exc:
        assert str(exc).startswith("acme.toml: ")


@FEW
@given(nasty_text)
def test_acme_toml_random_text(text):
    _config_loads_or_config_error(text)


def test_the_example_config_still_parses():
    assert parse_config(tomllib.loads(EXAMPLE_TOML), "example").store.url


# ------------------------------------------------------------ AcmeTrace rows

HEADER = [c.name for c in COLUMNS]


@FUZZ
@given(st.lists(st.text(max_size=30), min_size=len(HEADER), max_size=len(HEADER)))
def test_trace_rows_convert_or_are_bad_rows(record):
    converter = RowConverter(check_header(HEADER, "trace.csv"), "trace.csv")
    converter.convert(record, 2)  # a tuple, or a BadRow naming file, line and column; never raises


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(HEADER), st.text(max_size=12)), max_size=len(HEADER) + 2))
def test_trace_headers_are_accepted_or_input_errors(header):
    try:
        check_header(header, "trace.csv")
    except InputError as exc:
        assert str(exc).startswith("trace.csv:1: ")


# ------------------------------------------------------------ Slurm's output

SACCT = [json.loads(p.read_text()) for p in _fixtures("sacct*.json")]
SQUEUE = [json.loads(p.read_text()) for p in _fixtures("squeue*.json")]
SCONTROL = [p.read_text() for p in _fixtures("scontrol*.txt")]


def _slurm_parses_or_parse_error(parser, doc) -> None:  # type: ignore[no-untyped-def]
    try:
        parser(doc)
    except SlurmParseError:
        pass


@FUZZ
@given(st.sampled_from(SACCT).flatmap(json_leaf_swapped))
def test_sacct_json_mutated_fixtures(doc):
    _slurm_parses_or_parse_error(parse_sacct_json, doc)
    _slurm_parses_or_parse_error(parse_sacct_json, json.dumps(doc))


@FUZZ
@given(st.sampled_from(SQUEUE).flatmap(json_leaf_swapped))
def test_squeue_json_mutated_fixtures(doc):
    _slurm_parses_or_parse_error(parse_squeue_json, doc)


@FUZZ
@given(st.one_of(nasty_text, json_values.map(json.dumps)))
def test_slurm_json_random_text(text):
    _slurm_parses_or_parse_error(parse_sacct_json, text)
    _slurm_parses_or_parse_error(parse_squeue_json, text)


@FUZZ
@given(st.one_of(st.sampled_from(SCONTROL).flatmap(lambda t: mutated(t, 10)), nasty_text))
def test_scontrol_text(text):
    for parser in (parse_scontrol_show_job, parse_scontrol_show_node, parse_scontrol_show_config,
                   parse_job_gpu_groups, parse_sacct_exit_codes, parse_sinfo_nodes, parse_sbatch_parsable):
        _slurm_parses_or_parse_error(parser, text)
    _slurm_parses_or_parse_error(lambda t: gpu_indices_on(t, "node1"), text)


@FUZZ
@given(st.one_of(st.text(alphabet="node[]-,0123456789ab", max_size=30), nasty_text))
def test_hostlists(text):
    _slurm_parses_or_parse_error(expand_hostlist, text)


# ------------------------------------------------------------ rule files and log lines

RULES = (REPO / "slurm_acme" / "data" / "rules.yaml").read_text()


def _rules_parse_or_input_error(text: str) -> None:
    try:
        parse_rule_file(text, "rules.yaml")
    except InputError as exc:
        assert str(exc).startswith("rules.yaml")


@FUZZ
@given(mutated(RULES[:6000], 8))
def test_rule_files_mutated(text):
    _rules_parse_or_input_error(text)


@FUZZ
@given(st.one_of(nasty_text, st.dictionaries(st.sampled_from(["rules", "prefilter", "ignore", "node_patterns",
                                                              "disable", "version", "x"]),
                                             json_values, max_size=4).map(yaml.safe_dump)))
def test_rule_files_random(text):
    _rules_parse_or_input_error(text)


@FUZZ
@given(st.one_of(nasty_text, st.binary(max_size=300).map(decode)))
def test_log_lines_are_split_without_error(line):
    split_prefixes(line)


@FEW
@given(st.lists(st.one_of(nasty_text, st.binary(max_size=200).map(decode),
                          st.sampled_from(["[rank3]: RuntimeError: NCCL error", "srun: error: node2: task 3: Exited",
                                           "0: Traceback (most recent call last):", "CUDA error: out of memory"])),
                max_size=30))
def test_logs_are_diagnosed_without_error(lines):
    from slurm_acme.diagnose.streaming import StreamingDiagnoser

    diagnoser = StreamingDiagnoser(retrieval=False)
    for line in lines:
        diagnoser.feed(line)
    diagnoser.result()
