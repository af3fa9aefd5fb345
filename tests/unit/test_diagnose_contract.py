"""The supervisor's contract: diagnose(lines) -> Diagnosis, StreamingDiagnoser."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from slurm_acme.diagnose import Diagnosis, LogCompressor, RuleBook, StreamingDiagnoser, diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "diagnose"


def lines_of(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def test_public_names_are_importable():
    assert callable(diagnose) and LogCompressor and RuleBook and StreamingDiagnoser


def test_diagnosis_is_frozen_and_serialises_every_field():
    verdict = diagnose(["KeyError: 'x'"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.category = "other"  # type: ignore[misc]
    data = json.loads(verdict.to_json())
    assert set(data) == {"category", "origin", "action", "node", "rule_id", "confidence", "evidence", "source"}
    assert data["evidence"] == ["KeyError: 'x'"]
    assert Diagnosis.from_dict(data) == verdict


def test_injected_nccl_system_error_excludes_the_faulty_node():
    verdict = diagnose(lines_of("injected_nccl.log"))
    assert (verdict.origin, verdict.action, verdict.node) == ("infrastructure", "requeue_exclude_node", "node2")
    assert verdict.category == "NetworkError"
    assert "unhandled system error" in verdict.evidence[0]


def test_streaming_feed_with_rank_and_node_names_the_node():
    live = StreamingDiagnoser(RuleBook.load())
    live.feed("Traceback (most recent call last):", rank=5, node="node3")
    live.feed("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
              "unhandled system error, NCCL version 2.14.3", rank=5, node="node3")
    verdict = live.result()
    assert (verdict.action, verdict.node, verdict.source) == ("requeue_exclude_node", "node3", "rule")


def test_key_error_traceback_is_a_script_error_to_stop():
    verdict = diagnose(["Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
                        "    cfg['lr']", "KeyError: 'lr'"])
    assert (verdict.category, verdict.origin, verdict.action) == ("KeyError", "script", "stop")


def test_earliest_failure_across_ranks_wins_over_the_survivors_timeouts():
    verdict = diagnose(lines_of("keyerror_multirank.log"))
    assert (verdict.category, verdict.origin, verdict.action) == ("KeyError", "script", "stop")


def test_torchelastic_root_cause_block_picks_its_rank_and_host():
    verdict = diagnose(lines_of("torchelastic_root_cause.log"))
    assert verdict.category == "KeyError"
    assert verdict.node == "gpu-node7"


def test_sigkill_before_survivor_timeouts_is_host_memory_pressure():
    verdict = diagnose(lines_of("sigkill_then_timeouts.log"))
    assert (verdict.category, verdict.origin) == ("HostMemoryKilled", "framework")


def test_nccl_timeout_alone_is_infrastructure_requeue():
    verdict = diagnose(lines_of("sigkill_then_timeouts.log")[2:])
    assert (verdict.category, verdict.origin, verdict.action) == ("NCCLTimeoutError", "infrastructure", "requeue")


def test_nothing_recognisable_is_unknown_and_requeued_once_more():
    verdict = diagnose(["training started", "step 1 done", "bye"], cases=[])
    assert (verdict.category, verdict.origin, verdict.source) == ("unknown", "unknown", "none")
    assert verdict.action == "requeue" and verdict.confidence == 0.0


def test_empty_input_is_unknown():
    assert diagnose([]).is_unknown


def test_nccl_host_prefix_names_the_node_of_a_local_nic_fault():
    line = "node4:1234:5678 [0] NCCL WARN NET/IB : ibv_modify_qp failed with 110 Connection timed out"
    verdict = diagnose([line])
    assert (verdict.category, verdict.node, verdict.action) == ("NetworkError", "node4", "requeue_exclude_node")


def test_a_node_reporting_its_peers_completion_error_is_not_the_culprit():
    line = ("node4:1234:5678 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
            "from peer 10.0.0.2<53249> with error 12, opcode 0, len 0, vendor err 129")
    verdict = diagnose([line])
    assert (verdict.category, verdict.origin) == ("NetworkError", "infrastructure")
    assert verdict.node is None


def test_on_host_phrase_names_the_node():
    verdict = diagnose(["[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered on host node2"])
    assert (verdict.category, verdict.node) == ("ECCError", "node2")


def test_compressed_lines_fold_repeats_from_all_ranks():
    live = StreamingDiagnoser()
    for step in range(50):
        for rank in range(4):
            live.feed(f"{rank}: [rank{rank}]: data loader waited {step * 3 + rank} ms", rank=rank)
    lines = live.compressed_lines()
    assert len(lines) == 2
    assert lines[1].endswith("[x200]")
