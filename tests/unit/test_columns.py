"""Arrow columns as Python values, in C: the same values ``to_pylist`` gives,
row after row for a multi-row INSERT."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from slurm_acme.columns import python_values, row_major  # noqa: E402

ints = st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)), max_size=300)
floats = st.lists(st.one_of(st.none(), st.floats(allow_nan=False)), max_size=300)
#: few distinct strings (the dictionary path) or many (split from one buffer)
texts = st.one_of(st.lists(st.sampled_from(["COMPLETED", "FAILED", "ü", ""]), max_size=400),
                  st.lists(st.text(max_size=12), max_size=300))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(ints, floats, texts)
def test_python_values_are_to_pylist(i, f, t):
    for values, kind in ((i, pa.int64()), (f, pa.float64()), (t, pa.string())):
        array = pa.array(values, type=kind)
        got = python_values(array)
        assert got == array.to_pylist()
        assert [type(v) for v in got] == [type(v) for v in array.to_pylist()]
        assert python_values(pa.chunked_array([array.slice(0, len(array) // 2), array.slice(len(array) // 2)])) == got


def test_a_column_with_a_nul_or_nulls_reads_as_to_pylist():
    for values in (["a\x00b", "c"] * 100, ["a", None] * 100, ["x"] * 100):
        assert python_values(pa.array(values)) == values


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(st.integers(0, 300))
def test_row_major_is_the_rows_one_after_another(n):
    table = pa.table({"job_id": [str(k) for k in range(n)], "gpus": list(range(n)),
                      "state": ["COMPLETED", "FAILED"] * (n // 2) + ["COMPLETED"] * (n % 2),
                      "end_ts": [None if k % 3 else k / 3 for k in range(n)]})
    assert row_major(table) == [v for row in table.to_pylist() for v in row.values()]
