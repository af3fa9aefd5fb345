"""ACME_HEALTH_FAULT: which node misbehaves, and how."""

from __future__ import annotations

import pytest

from slurm_acme.errors import InputError
from slurm_acme.health.faults import DEFAULT_SLOW_S, Fault, fault_for, parse_faults


def test_each_node_gets_its_fault() -> None:
    assert parse_faults("node2:raise, node3:hang,node4:slow:0.5") == {
        "node2": Fault("raise"), "node3": Fault("hang"), "node4": Fault("slow", 0.5)}
    assert parse_faults("node4:slow")["node4"].delay_s == DEFAULT_SLOW_S


def test_unnamed_nodes_and_empty_spec_have_no_fault() -> None:
    assert fault_for("node1", {"ACME_HEALTH_FAULT": "node2:raise"}) is None
    assert fault_for("node1", {}) is None


@pytest.mark.parametrize("spec", ["node2", "node2:explode", ":raise", "node4:slow:fast"])
def test_bad_spec_is_an_input_error_naming_the_entry(spec: str) -> None:
    with pytest.raises(InputError, match="ACME_HEALTH_FAULT"):
        parse_faults(spec)
