"""Frozen settings sections, validated from decoded TOML, without pydantic.

Why: every ``sacme`` command reads ``acme.toml`` first, and pydantic (its
import, then building a validator for each model) cost a command like
``sacme status`` about 100 ms before it did anything. ``acme.toml`` needs
little of it: a section is a frozen dataclass whose type hints are the rules
(``str``, ``int``, ``float``, ``bool``, ``Literal[...]``, ``list[X]``,
``X | None`` and nested sections) and :func:`setting` adds bounds. As with the
pydantic models before, an unknown key is an error, and every error names the
dotted field and the value in pydantic's words, so the messages read as before.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, Union

_S = TypeVar("_S", bound="Section")
_BOUNDS = {"gt": "greater than", "ge": "greater than or equal to", "le": "less than or equal to"}


class SectionError(ValueError):
    """One invalid value: ``loc`` is its path (section, field, list index), ``kind`` is
    ``extra`` (an unknown key), ``missing`` (a required key) or ``value``."""

    def __init__(self, loc: tuple[str | int, ...], kind: str, message: str, value: Any = None) -> None:
        super().__init__(message)
        self.loc, self.kind, self.message, self.value = loc, kind, message, value

    @property
    def field(self) -> str:
        return ".".join(str(p) for p in self.loc)

    def describe(self) -> str:
        """The one-line message ``acme.toml`` errors show."""
        if self.kind == "extra":
            return f"unknown field {self.field!r}"
        if self.kind == "missing":
            return f"missing field {self.field!r}"
        return f"field {self.field!r}: {self.message} (got {self.value!r})"


def setting(default: Any = dataclasses.MISSING, *, default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
            gt: float | None = None, ge: float | None = None, le: float | None = None,
            description: str = "") -> Any:
    """A section field with a default and optional bounds (``gt``, ``ge``, ``le``)."""
    bounds = {name: value for name, value in (("gt", gt), ("ge", ge), ("le", le)) if value is not None}
    metadata = {"bounds": bounds, "description": description}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Section:
    """A frozen group of settings; subclasses are frozen dataclasses too.

    Made from keywords, a section checks and converts them the same way
    (``EvaluateConfig(lm_eval={"limit": 5})`` holds a ``HarnessToolConfig``).
    """

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for spec in dataclasses.fields(self):
            value = _convert(hints[spec.name], getattr(self, spec.name), (spec.name,))
            _check_bounds(spec.metadata.get("bounds", {}), value, (spec.name,))
            object.__setattr__(self, spec.name, value)

    @classmethod
    def validate(cls: type[_S], data: Mapping[str, Any], loc: tuple[str | int, ...] = ()) -> _S:
        """A section from a decoded table: checked and converted, or :class:`SectionError`."""
        if not isinstance(data, Mapping):
            raise SectionError(loc, "value", "input should be a valid dictionary", data)
        hints = _hints(cls)
        known = {f.name: f for f in dataclasses.fields(cls)}
        for key in data:
            if key not in known:
                raise SectionError((*loc, key), "extra", "extra inputs are not permitted", data[key])
        values: dict[str, Any] = {}
        for name, spec in known.items():
            if name not in data:
                if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                    raise SectionError((*loc, name), "missing", "field required")
                continue
            value = _convert(hints[name], data[name], (*loc, name))
            _check_bounds(spec.metadata.get("bounds", {}), value, (*loc, name))
            values[name] = value
        return cls(**values)

    def with_changes(self: _S, **changes: Any) -> _S:
        """A copy with ``changes`` applied, validated like ``acme.toml``."""
        return type(self).validate({**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain values (nested sections as dicts)."""
        return dataclasses.asdict(self)


_hint_cache: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _hint_cache:
        _hint_cache[cls] = typing.get_type_hints(cls)
    return _hint_cache[cls]


def _choices(options: tuple[Any, ...]) -> str:
    shown = [repr(o) for o in options]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def _convert(hint: Any, value: Any, loc: tuple[str | int, ...]) -> Any:
    """``value`` as the type ``hint`` asks for (pydantic's lax rules, for TOML's types)."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        (inner,) = [o for o in options if o is not type(None)]
        return _convert(inner, value, loc)
    if origin is Literal:
        options = typing.get_args(hint)
        if value in options and not isinstance(value, bool):
            return value
        raise SectionError(loc, "value", f"input should be {_choices(options)}", value)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise SectionError(loc, "value", "input should be a valid list", value)
        (item,) = typing.get_args(hint)
        return [_convert(item, v, (*loc, i)) for i, v in enumerate(value)]
    if isinstance(hint, type) and issubclass(hint, Section):
        return value if isinstance(value, hint) else hint.validate(value, loc)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise SectionError(loc, "value", "input should be a valid boolean", value)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise SectionError(loc, "value", "input should be a valid integer", value)
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise SectionError(loc, "value", "input should be a valid number", value)
    if hint is str:
        if isinstance(value, str):
            return value
        raise SectionError(loc, "value", "input should be a valid string", value)
    raise TypeError(f"{'.'.join(map(str, loc))}: no rule for the type {hint!r}")  # a bug in a section


def _check_bounds(bounds: Mapping[str, float], value: Any, loc: tuple[str | int, ...]) -> None:
    if value is None or not bounds:
        return
    for name, limit in bounds.items():
        ok = value > limit if name == "gt" else value >= limit if name == "ge" else value <= limit
        if not ok:
            raise SectionError(loc, "value", f"input should be {_BOUNDS[name]} {limit}", value)
