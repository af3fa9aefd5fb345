"""numpy <-> pyarrow without pyarrow's pandas shim.

``pa.array``, ``Array.to_numpy`` and compute calls given Python scalars make
pyarrow import pandas when it is installed: half a second of every
``sacme import-trace``. These helpers build and read arrays from their
buffers instead. Only for arrays without nulls unless a mask is given.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_NUMPY = {pa.int32(): np.int32, pa.int64(): np.int64, pa.float64(): np.float64}


def to_numpy(array: pa.Array) -> np.ndarray:
    """A numeric (int32, int64, float64) or boolean array's values; nulls read as
    whatever the buffer holds (0 or NaN for arrays made by :func:`from_numpy`)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type == pa.bool_():
        bits = np.frombuffer(array.buffers()[1], dtype=np.uint8)
        values = np.unpackbits(bits, bitorder="little")[array.offset:array.offset + len(array)].astype(bool)
        return values & valid(array) if array.null_count else values
    data = np.frombuffer(array.buffers()[1], dtype=_NUMPY[array.type])
    return data[array.offset:array.offset + len(array)]


def valid(array: pa.Array) -> np.ndarray:
    """True where ``array`` holds a value (not null)."""
    if not array.null_count:
        return np.ones(len(array), dtype=bool)
    bits = np.frombuffer(array.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[array.offset:array.offset + len(array)].astype(bool)


def _bitmap(mask: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(np.asarray(mask, dtype=bool), bitorder="little"))


def from_numpy(values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    """An arrow array of ``values`` (bool, int32, int64 or float64); ``null`` marks nulls."""
    values = np.ascontiguousarray(values)
    n = len(values)
    validity = None if null is None or not null.any() else _bitmap(~null)
    if values.dtype == bool:
        return pa.Array.from_buffers(pa.bool_(), n, [validity, _bitmap(values)])
    kind = {np.dtype(np.int32): pa.int32(), np.dtype(np.int64): pa.int64(), np.dtype(np.float64): pa.float64()}
    return pa.Array.from_buffers(kind[values.dtype], n, [validity, pa.py_buffer(values)])


def constant_strings(value: str, n: int) -> pa.Array:
    """``n`` copies of ``value`` as a string array."""
    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int64) * len(data)
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                       pa.py_buffer(data * n)])
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def strings(values: list[str]) -> pa.Array:
    """A string array of Python strings."""
    encoded = [v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    kind, width = (pa.string(), np.int32) if offsets[-1] < 2**31 else (pa.large_string(), np.int64)
    return pa.Array.from_buffers(kind, len(encoded), [None, pa.py_buffer(offsets.astype(width)),
                                                      pa.py_buffer(b"".join(encoded))])


def python_strings(array: pa.Array) -> list[str | None]:
    """A string array's values as Python strings, split in C when no value holds a NUL
    (about ten times ``to_pylist``'s speed)."""
    if array.type != pa.string() or array.null_count or not len(array):
        return array.to_pylist()
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset:array.offset + len(array) + 1]
    data = np.frombuffer(array.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    if (data == 0).any():
        return array.to_pylist()
    joined = np.insert(data, offsets[1:-1] - offsets[0], 0)
    values: list[str | None] = list(joined.tobytes().decode("utf-8").split("\x00"))
    return values


#: A string column with at most this share of distinct values is converted through
#: its dictionary: each distinct value becomes one Python string, shared by its rows.
_SHARED_STRINGS = 0.25


def python_values(array: pa.Array | pa.ChunkedArray) -> list[Any]:
    """A column's values as Python objects (None for nulls), in C: numbers through
    numpy, repetitive strings (a state, a user) through their dictionary."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type in _NUMPY:
        values = to_numpy(array).tolist()
        if array.null_count:
            for i in np.flatnonzero(~valid(array)).tolist():
                values[i] = None
        return values
    if array.type == pa.string() and not array.null_count and len(array) > 64:
        encoded = pc.dictionary_encode(array)
        if len(encoded.dictionary) <= _SHARED_STRINGS * len(array):
            distinct = np.array(encoded.dictionary.to_pylist(), dtype=object)
            return distinct[to_numpy(encoded.indices)].tolist()  # type: ignore[no-any-return]
    return python_strings(array)


def row_major(table: pa.Table) -> list[Any]:
    """``table``'s values row after row in one flat list (row ``i``, column ``j`` at
    ``i * num_columns + j``): what a multi-row ``INSERT ... VALUES`` binds."""
    width = table.num_columns
    flat: list[Any] = [None] * (table.num_rows * width)
    for j, column in enumerate(table.columns):
        flat[j::width] = python_values(column)
    return flat
