"""pyarrow tables into a Postgres ``COPY``: binary (pgpq) when installed, CSV otherwise.

Why binary: the server then reads each value as it is stored, instead of parsing
text (about a third of a bulk load's server time), and pgpq encodes a batch in
Rust faster than pyarrow writes it as CSV. Binary values must have the column's
exact type, so each arrow column is cast to its target column's type, read off
the catalog (``integer`` from int64 to int32, and so on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Arrow type of each Postgres type a binary COPY may send (pgpq's mapping).
_ARROW_OF = {"integer": "int32", "bigint": "int64", "smallint": "int16", "double precision": "float64",
             "real": "float32", "text": "string", "character varying": "string", "boolean": "bool"}


def binary_available() -> bool:
    try:
        import pgpq  # noqa: F401
    except ImportError:
        return False
    return True


def column_types(cursor: Any, table: str, names: Sequence[str]) -> list[str]:
    """The Postgres type of each of ``names`` in ``table`` (a table this connection sees)."""
    cursor.execute("SELECT attname, format_type(atttypid, NULL) FROM pg_attribute "
                   "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped", (table,))
    found = dict(cursor.fetchall())
    return [found[name] for name in names]


class CopyEncoder:
    """Encodes one table's rows for one ``COPY table (names) FROM STDIN``: :attr:`sql`
    opens it; :meth:`header`, then :meth:`batch` per pyarrow table (columns in
    ``names`` order), then :meth:`trailer` are its bytes, in that order."""

    def __init__(self, cursor: Any, table: str, names: Sequence[str], *, binary: bool | None = None):
        from slurm_acme.store.dbapi import quoted

        self.binary = binary_available() if binary is None else binary
        self._encoder: Any = None
        self._schema: Any = None
        if self.binary:
            pg_types = column_types(cursor, table, names)
            if all(t in _ARROW_OF for t in pg_types):
                import pgpq
                import pyarrow as pa

                self._schema = pa.schema([(n, getattr(pa, _ARROW_OF[t])()) for n, t in zip(names, pg_types,
                                                                                           strict=True)])
                self._encoder = pgpq.ArrowToPostgresBinaryEncoder(self._schema)
            else:  # a type the mapping does not know: text, which the server parses
                self.binary = False
        self.sql = f"COPY {table} ({quoted(names)}) FROM STDIN (FORMAT {'binary' if self.binary else 'csv'})"

    def header(self) -> bytes:
        return self._encoder.write_header() if self.binary else b""  # type: ignore[no-any-return]

    def batch(self, table: Any) -> bytes:
        if not self.binary:
            import pyarrow as pa
            import pyarrow.csv as pa_csv

            sink = pa.BufferOutputStream()
            pa_csv.write_csv(table, sink, pa_csv.WriteOptions(include_header=False))
            return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]
        import pyarrow as pa

        cast = pa.Table.from_arrays([column if column.type == field.type else column.cast(field.type)
                                     for column, field in zip(table.columns, self._schema, strict=True)],
                                    schema=self._schema)
        return b"".join(self._encoder.write_batch(batch) for batch in cast.to_batches())

    def trailer(self) -> bytes:
        return self._encoder.finish() if self.binary else b""  # type: ignore[no-any-return]
