"""train.yaml validation: one-line errors naming file, line and field."""

from __future__ import annotations

import pytest

from slurm_acme.errors import InputError
from slurm_acme.ft.spec import load_spec, parse_spec

GOOD = """\
name: tiny
nodes: 2
command: [python, train.py]
checkpoint:
  dir: ckpt
  async: true
fault_tolerance:
  max_restarts: 2
  loss_spike: {ratio: 4}
"""


def test_good_spec_parses_with_defaults() -> None:
    spec = parse_spec(GOOD, "t.yaml")
    assert spec.nodes == 2
    assert spec.checkpoint.async_ is True
    assert spec.fault_tolerance.loss_spike.ratio == 4
    assert spec.fault_tolerance.health_check == "allgather"
    assert spec.argv == ["python", "train.py"]


def test_string_command_runs_under_bash() -> None:
    spec = parse_spec(GOOD.replace("command: [python, train.py]", "command: python train.py | tee x"), "t.yaml")
    assert spec.argv == ["bash", "-c", "python train.py | tee x"]


def test_unknown_top_level_key_lists_valid_ones_and_line() -> None:
    with pytest.raises(InputError) as err:
        parse_spec(GOOD + "nodez: 3\n", "t.yaml")
    msg = str(err.value)
    assert msg.startswith("t.yaml:10: unknown field 'nodez'")
    assert "valid: name, nodes," in msg and "fault_tolerance" in msg


def test_unknown_nested_key_names_its_section() -> None:
    with pytest.raises(InputError) as err:
        parse_spec(GOOD.replace("  max_restarts: 2", "  max_restart: 2"), "t.yaml")
    assert str(err.value).startswith("t.yaml:8: unknown field 'fault_tolerance.max_restart'")
    assert "max_restarts" in str(err.value)


def test_negative_nodes_is_rejected_with_line() -> None:
    with pytest.raises(InputError, match=r"^t.yaml:2: field 'nodes'.*greater than or equal to 1"):
        parse_spec(GOOD.replace("nodes: 2", "nodes: -3"), "t.yaml")


def test_bad_yaml_is_one_line_with_line_number() -> None:
    with pytest.raises(InputError) as err:
        parse_spec("name: tiny\nnodes: [2\n", "t.yaml")
    assert str(err.value).startswith("t.yaml:")
    assert "not valid YAML" in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_required_field() -> None:
    with pytest.raises(InputError, match="missing field 'command'"):
        parse_spec(GOOD.replace("command: [python, train.py]\n", ""), "t.yaml")


def test_top_level_must_be_mapping() -> None:
    with pytest.raises(InputError, match="expected a mapping"):
        parse_spec("- a\n- b\n", "t.yaml")


def test_set_overrides_are_typed_and_dotted() -> None:
    spec = parse_spec(GOOD, "t.yaml", ["nodes=3", "fault_tolerance.hang_timeout=7.5",
                                        "checkpoint.interval=10"])
    assert (spec.nodes, spec.fault_tolerance.hang_timeout, spec.checkpoint.interval) == (3, 7.5, 10)


def test_set_without_equals_is_an_input_error() -> None:
    with pytest.raises(InputError, match="expected key=value"):
        parse_spec(GOOD, "t.yaml", ["nodes"])


def test_missing_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="file not found"):
        load_spec(tmp_path / "nope.yaml")


def test_json_round_trip_keeps_alias() -> None:
    spec = parse_spec(GOOD, "t.yaml")
    assert '"async":true' in spec.to_json()
    assert type(spec).from_json(spec.to_json()) == spec


def test_bad_set_value_names_the_override() -> None:
    with pytest.raises(InputError, match=r"^t.yaml: --set nodes=abc: field 'nodes'"):
        parse_spec(GOOD, "t.yaml", ["nodes=abc"])


# ------------------------------------------------------------ launchers, sbatch, progress

@pytest.mark.parametrize("command,launcher", [
    ("[srun, python, train.py]", "srun"),
    ("'srun -n 8 python train.py'", "srun"),
    ("'env NCCL_DEBUG=INFO timeout 10h srun python train.py'", "srun"),
    ("[/usr/bin/srun, python, train.py]", "srun"),
    ("'cd /x && torchrun --nproc-per-node 8 train.py'", "torchrun"),
    ("[python, -m, torch.distributed.run, train.py]", "python -m torch.distributed.run"),
    ("[bash, -c, 'sbatch job.sh']", "sbatch"),
    ("'mpirun -np 8 python train.py'", "mpirun"),
])
def test_a_command_that_starts_its_own_launcher_is_rejected_with_the_fix(command: str, launcher: str) -> None:
    with pytest.raises(InputError) as err:
        parse_spec(GOOD.replace("command: [python, train.py]", f"command: {command}"), "t.yaml")
    msg = str(err.value)
    assert msg.startswith("t.yaml:3: field 'command':") and f"`{launcher}`" in msg
    assert "\n" not in msg
    if "torch" in launcher:
        assert "launch: torchrun" in msg


@pytest.mark.parametrize("command", ["'python train.py | tee srun.log'", "[python, train.py, --name, srun]",
                                     "[python, srun_helpers.py]", "'echo sbatch is not run here; python t.py'"])
def test_commands_that_only_mention_a_launcher_are_fine(command: str) -> None:
    parse_spec(GOOD.replace("command: [python, train.py]", f"command: {command}"), "t.yaml")


def test_torchrun_launch_takes_only_the_script() -> None:
    text = GOOD.replace("command: [python, train.py]", "launch: torchrun\ncommand: [torchrun, train.py]")
    with pytest.raises(InputError, match="launch: torchrun already starts one torchrun agent per node"):
        parse_spec(text, "t.yaml")
    spec = parse_spec(GOOD.replace("command: [python, train.py]", "launch: torchrun\ncommand: [train.py]"), "t.yaml")
    assert spec.launch == "torchrun"


def test_torchrun_cannot_forward_the_time_limit_checkpoint_signal() -> None:
    text = GOOD.replace("command: [python, train.py]", "launch: torchrun\ncommand: [train.py]").replace(
        "  max_restarts: 2", "  max_restarts: 2\n  time_limit_action: checkpoint")
    with pytest.raises(InputError, match="field 'fault_tolerance': time_limit_action 'checkpoint' needs launch: srun"):
        parse_spec(text, "t.yaml")


def test_sbatch_passthrough_allows_listed_options_only() -> None:
    spec = parse_spec(GOOD + "sbatch: {mem: 64G, constraint: 'a100&ib', exclusive: true, gres_flags: enforce-binding}\n", "t.yaml")
    assert spec.sbatch["mem"] == "64G"
    with pytest.raises(InputError) as err:
        parse_spec(GOOD + "sbatch: {memory: 64G}\n", "t.yaml")
    assert str(err.value).startswith("t.yaml:10: field 'sbatch': 'memory' is not an sbatch option")
    assert "allowed: " in str(err.value) and "constraint" in str(err.value) and "reservation" in str(err.value)


@pytest.mark.parametrize("extra,expected", [
    ("sbatch: {nodes: 4}", "set by train.yaml's own field 'nodes'"),
    ("sbatch: {output: /tmp/x}", "'output' is not an sbatch option"),
    ("sbatch: {requeue: true}", "'requeue' is not an sbatch option"),
    ("sbatch: {mem: true}", "'mem' needs a value"),
    ("sbatch: {contiguous: yes-please}", "'contiguous' is a flag"),
    ('sbatch: {constraint: "a\\nb"}', "control character"),
])
def test_sbatch_passthrough_errors_name_the_key(extra: str, expected: str) -> None:
    with pytest.raises(InputError, match=expected):
        parse_spec(GOOD + extra + "\n", "t.yaml")


def test_progress_patterns_must_compile_and_have_a_group() -> None:
    with pytest.raises(InputError, match="is not a regular expression"):
        parse_spec(GOOD + "progress: {patterns: ['it=(']}\n", "t.yaml")
    with pytest.raises(InputError, match="has no group for the step number"):
        parse_spec(GOOD + "progress: {patterns: ['it=\\d+']}\n", "t.yaml")


def test_checkpoint_globs_are_names_inside_the_folder() -> None:
    with pytest.raises(InputError, match=r"is not a file-name pattern inside checkpoint\.dir"):
        parse_spec(GOOD.replace("  async: true", "  async: true\n  glob: ['../*.pt']"), "t.yaml")


def test_spares_absent_means_requeue_recovery() -> None:
    spec = parse_spec(GOOD, "t.yaml")
    assert spec.fault_tolerance.spares is None and not spec.fault_tolerance.in_place
    assert spec.allocated_nodes == 2


def test_spares_allocate_extra_nodes_and_recover_in_place() -> None:
    spec = parse_spec(GOOD.replace("  max_restarts: 2", "  spares: 1"), "t.yaml")
    assert spec.fault_tolerance.in_place and spec.allocated_nodes == 3
    zero = parse_spec(GOOD.replace("  max_restarts: 2", "  spares: 0"), "t.yaml")
    assert zero.fault_tolerance.in_place and zero.allocated_nodes == 2


@pytest.mark.parametrize("value", ["-1", "two", "1.5", "true"])
def test_bad_spares_is_one_line_naming_the_field_and_value(value: str) -> None:
    with pytest.raises(InputError) as err:
        parse_spec(GOOD.replace("  max_restarts: 2", f"  spares: {value}"), "t.yaml")
    msg = str(err.value)
    assert msg.startswith("t.yaml:8: field 'fault_tolerance.spares'") and "\n" not in msg
    assert "got" in msg
