"""A hostile train.yaml gets a one-line error and reaches neither the batch script nor Slurm."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from slurm_acme.errors import InputError
from slurm_acme.ft.plan import build_plan
from slurm_acme.ft.spec import MAX_SPEC_BYTES, load_spec, parse_spec

REST = "nodes: 1\ncommand: [python, train.py]\ncheckpoint: {dir: ckpt}\n"


@pytest.mark.parametrize(("field", "yaml_value"), [
    ("name", '"x\\ntouch /tmp/pwned #"'),
    ("name", '"x\\rtouch /tmp/pwned"'),
    ("name", '"x\\0y"'),
    ("partition", '"gpu\\nexit 0"'),
    ("account", '"a\\u001bb"'),
    ("workdir", '"dir\\nrm -rf ~"'),
])
def test_control_characters_in_script_values_are_refused_naming_the_field(field, yaml_value):
    text = REST + ("name: ok\n" if field != "name" else "") + f"{field}: {yaml_value}\n"
    with pytest.raises(InputError) as err:
        parse_spec(text, "train.yaml")
    message = str(err.value)
    assert message.startswith("train.yaml:")
    assert f"field {field!r}" in message and "control character" in message
    assert "\n" not in message and "\r" not in message


def test_control_characters_in_nested_and_list_values_are_refused():
    with pytest.raises(InputError, match=r"field 'fault_tolerance\.exclude'"):
        parse_spec("name: ok\n" + REST + 'fault_tolerance: {exclude: ["node1\\nnode2"]}\n', "t.yaml")
    with pytest.raises(InputError, match=r"field 'checkpoint\.dir'"):
        parse_spec("name: ok\nnodes: 1\ncommand: [x]\ncheckpoint: {dir: \"a\\nb\"}\n", "t.yaml")


def test_an_override_cannot_smuggle_a_newline():
    with pytest.raises(InputError) as err:
        parse_spec("name: ok\n" + REST, "t.yaml", ['name="x\\ntouch /tmp/pwned"'])
    assert "--set" in str(err.value) and "control character" in str(err.value)


def test_the_users_own_multiline_shell_command_and_env_values_are_kept():
    spec = parse_spec("name: ok\nnodes: 1\ncheckpoint: {dir: c}\ncommand: \"cd x\\npython t.py\"\n"
                      "env: {NOTE: \"two\\nlines\"}\n", "t.yaml")
    assert spec.command == "cd x\npython t.py" and spec.env["NOTE"] == "two\nlines"


def test_no_user_value_is_rendered_inside_a_comment():
    spec = parse_spec("name: \"evil $(touch /tmp/x) '; echo\"\n" + REST, "t.yaml")
    plan = build_plan(spec, spec_path="t.yaml", db_url="sqlite:////tmp/x.db", cwd="/tmp")
    for line in plan.script.splitlines():
        if line.lstrip().startswith("#"):
            assert "evil" not in line and plan.run_id not in line, line


def test_shell_metacharacters_in_the_name_stay_data():
    name = "a'b\"c $(touch /tmp/p) `id`; rm -rf ~ #"
    spec = parse_spec("name: " + json.dumps(name) + "\n" + REST, "t.yaml")
    plan = build_plan(spec, spec_path="t.yaml", db_url="sqlite:////tmp/x.db", cwd="/tmp")
    assert f"--job-name={name}" in plan.sbatch_argv  # one argv element, never a shell string
    proc = subprocess.run(["bash", "-n", "-c", plan.script], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_yaml_aliases_are_refused_before_expansion():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)},"
        f" *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9)) + "name: *j\n" + REST
    with pytest.raises(InputError) as err:
        parse_spec(bomb, "bomb.yaml")
    assert str(err.value) == "bomb.yaml:1: YAML anchors and aliases are not allowed in a spec"


def test_a_single_anchor_is_refused_too():
    with pytest.raises(InputError, match="anchors and aliases"):
        parse_spec("name: &n ok\n" + REST, "t.yaml")


def test_an_override_value_with_an_alias_is_refused():
    with pytest.raises(InputError, match="anchors and aliases"):
        parse_spec("name: ok\n" + REST, "t.yaml", ["env=&a {A: *a}"])


def test_a_spec_over_the_size_cap_is_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("name: ok\n" + REST + "#" * MAX_SPEC_BYTES)
    with pytest.raises(InputError, match="larger than"):
        load_spec(path)


def test_deep_nesting_is_an_input_error_not_a_crash():
    with pytest.raises(InputError, match="nested deeper than 32 levels"):
        parse_spec("name: " + "[" * 400000 + "]" * 400000 + "\n", "t.yaml")
    with pytest.raises(InputError, match="nested deeper than 32 levels"):
        parse_spec("".join("  " * i + f"k{i}:\n" for i in range(40)), "t.yaml")


def test_non_text_values_are_field_errors():
    with pytest.raises(InputError, match="field 'name'"):
        parse_spec("name: 2023-01-01\n" + REST, "t.yaml")
    spec = parse_spec("name: ok\n" + REST + "env: {WHEN: 2023-01-01}\n", "t.yaml")
    assert spec.env["WHEN"] == '"2023-01-01"'


def test_cli_hostile_name_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    marker = Path(f"/tmp/acme-sec-pwned-{uuid.uuid4().hex}")
    spec = tmp_path / "train.yaml"
    spec.write_text(f'name: "x\\ntouch {marker} #"\n' + REST)
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", f"sqlite:///{tmp_path / 'a.db'}",
                           "submit", str(spec)], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "field 'name'" in proc.stderr
    assert not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.yaml"]
