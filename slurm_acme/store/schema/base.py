"""The shared ``MetaData`` every domain module adds its tables to."""

from __future__ import annotations

from sqlalchemy import MetaData

#: Constraint names are fixed so migrations can refer to them on both backends.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)
