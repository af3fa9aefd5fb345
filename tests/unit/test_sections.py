"""Settings sections (``slurm_acme.sections``): acme.toml's types, bounds and messages."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Literal

import pytest

from slurm_acme.sections import Section, SectionError, setting


@dataclasses.dataclass(frozen=True)
class Inner(Section):
    name: str
    level: Literal["low", "high"] = "low"


@dataclasses.dataclass(frozen=True)
class Outer(Section):
    rate: float = setting(1.0, gt=0)
    count: int = setting(3, ge=1, le=10)
    share: float | None = setting(None, ge=0, le=1)
    on: bool = False
    tags: list[str] = setting(default_factory=list)
    inner: Inner = setting(default_factory=lambda: Inner(name="x"))
    rules: list[Inner] = setting(default_factory=list)


def error_of(data: dict) -> SectionError:  # type: ignore[type-arg]
    with pytest.raises(SectionError) as info:
        Outer.validate(data, ("top",))
    return info.value


def test_values_are_converted_as_toml_gives_them():
    got = Outer.validate({"rate": 2, "count": 4.0, "share": 0.5, "on": True, "tags": ["a"],
                          "inner": {"name": "n", "level": "high"}, "rules": [{"name": "r"}]})
    assert got == Outer(rate=2.0, count=4, share=0.5, on=True, tags=["a"], inner=Inner("n", "high"),
                        rules=[Inner("r")])
    assert isinstance(got.rate, float) and isinstance(got.count, int)
    assert Outer.validate({}) == Outer()


@pytest.mark.parametrize(("data", "message"), [
    ({"rat": 1}, "unknown field 'top.rat'"),
    ({"inner": {"name": "n", "colour": "red"}}, "unknown field 'top.inner.colour'"),
    ({"rules": [{"level": "low"}]}, "missing field 'top.rules.0.name'"),
    ({"rate": "hot"}, "field 'top.rate': input should be a valid number (got 'hot')"),
    ({"rate": 0}, "field 'top.rate': input should be greater than 0 (got 0.0)"),
    ({"count": 11}, "field 'top.count': input should be less than or equal to 10 (got 11)"),
    ({"count": 1.5}, "field 'top.count': input should be a valid integer (got 1.5)"),
    ({"count": True}, "field 'top.count': input should be a valid integer (got True)"),
    ({"share": -0.1}, "field 'top.share': input should be greater than or equal to 0 (got -0.1)"),
    ({"on": "yes"}, "field 'top.on': input should be a valid boolean (got 'yes')"),
    ({"tags": "a"}, "field 'top.tags': input should be a valid list (got 'a')"),
    ({"tags": ["a", 5]}, "field 'top.tags.1': input should be a valid string (got 5)"),
    ({"inner": {"name": "n", "level": "mid"}}, "field 'top.inner.level': input should be 'low' or 'high' (got 'mid')"),
    ({"inner": "n"}, "field 'top.inner': input should be a valid dictionary (got 'n')"),
])
def test_an_error_names_the_field_and_the_value(data, message):
    assert error_of(data).describe() == message


def test_made_from_keywords_a_section_is_checked_and_converted_too():
    made = Outer(inner={"name": "k"}, rules=[{"name": "r", "level": "high"}], rate=3)  # type: ignore[arg-type]
    assert made.inner == Inner("k") and made.rules == [Inner("r", "high")] and made.rate == 3.0
    with pytest.raises(SectionError, match="greater than 0"):
        Outer(rate=-1)


def test_changes_are_validated_and_the_original_is_kept():
    base = Outer()
    assert base.with_changes(count=5).count == 5 and base.count == 3
    with pytest.raises(SectionError, match="less than or equal to 10"):
        base.with_changes(count=50)
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.count = 4  # type: ignore[misc]
    assert base.to_dict()["inner"] == {"name": "x", "level": "low"}


def test_reading_acme_toml_imports_no_pydantic(tmp_path):
    path = tmp_path / "acme.toml"
    path.write_text('[cluster]\nname = "seren"\n[telemetry]\ninterval_s = 5\n[evaluate.lm_eval]\nlimit = 0.5\n')
    probe = ("import sys; from slurm_acme.config import load_config; c = load_config(sys.argv[1]); "
             "assert c.telemetry.interval_s == 5.0 and c.evaluate.lm_eval.limit == 0.5; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic'))")
    done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
