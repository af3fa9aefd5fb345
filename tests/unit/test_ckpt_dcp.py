"""AsyncCheckpointer writes standard torch.distributed.checkpoint (DCP) checkpoints:
read by DCP's own tools without slurm-acme, and resumed exactly by slurm-acme."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from state_equal import assert_same_state
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from slurm_acme.ckpt.checkpointer import AsyncCheckpointer, CheckpointMismatch
from slurm_acme.ckpt.fsio import checksum_file
from slurm_acme.ckpt.manifest import MANIFEST_NAME, Manifest, ShardRecord, read_manifest


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))


def _trained(steps: int = 2) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 6)).pow(2).mean().backward()
        opt.step()
    return model, opt


def _save(ckpt_dir: Path, step: int, state: dict, rank_state: object = None) -> Path:
    ck = AsyncCheckpointer(ckpt_dir, keep=5)
    ck.save(step, state, rank_state)
    result = ck.wait()
    assert result is not None and result.committed, result
    ck.close()
    return ckpt_dir / f"step_{step:08d}"


def test_dcp_load_reads_it_without_slurm_acme(tmp_path: Path) -> None:
    model, opt = _trained()
    step_dir = _save(tmp_path, 3, {"model": model.state_dict(), "optim": opt.state_dict()})
    code = f"""
import sys, json
sys.modules["slurm_acme"] = None  # importing slurm_acme now fails: DCP alone must do
import torch, torch.distributed.checkpoint as dcp
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
sd = {{"model": model.state_dict()}}
dcp.load(sd, checkpoint_id={str(step_dir)!r})
print(json.dumps({{k: v.tolist() for k, v in sd["model"].items()}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    loaded = json.loads(out.strip().splitlines()[-1])
    assert sorted(loaded) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    for key, value in model.state_dict().items():
        assert torch.equal(torch.tensor(loaded[key]), value)


def test_dcp_to_torch_save_converts_it(tmp_path: Path) -> None:
    model, opt = _trained()
    step_dir = _save(tmp_path, 3, {"model": model.state_dict(), "optim": opt.state_dict()},
                     rank_state={"seed": 7})
    dcp_to_torch_save(step_dir, tmp_path / "full.pt")
    full = torch.load(tmp_path / "full.pt", weights_only=False)
    assert torch.equal(full["model"]["2.weight"], model.state_dict()["2.weight"])
    assert full["rank_state"] == {"0": {"seed": 7}}


def test_the_step_directory_is_a_dcp_checkpoint_with_the_manifest_beside_it(tmp_path: Path
                                                                            ) -> None:
    step_dir = _save(tmp_path, 8, {"w": torch.ones(3)})
    assert sorted(p.name for p in step_dir.iterdir()) == [".metadata", "__0_0.distcp",
                                                          MANIFEST_NAME]
    manifest = read_manifest(step_dir)
    assert manifest is not None and manifest.format == "dcp" and manifest.version == 2
    for shard in manifest.shards:
        written = checksum_file(step_dir / shard.file)
        assert (written.bytes, written.checksum) == (shard.bytes, shard.checksum)


def _rich_state() -> tuple[dict, dict]:
    model, opt = _trained()
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 12,
             "sched": {"last_epoch": 3, "history": [0.1, 0.05]}, "empty": {},
             "by_int": {0: torch.ones(2), 5: {"nested": torch.zeros(1)}},
             "blob": b"\x00\x01", "half": torch.ones(3, dtype=torch.bfloat16),
             "flags": torch.tensor([True, False]), "nothing": torch.empty(0, 5),
             "shape": torch.Size([2, 3]), "pair": (1, "a")}
    rank_state = {"torch": torch.get_rng_state(), "python": random.getstate(),
                  "numpy": np.random.get_state(), "arr": np.arange(5, dtype=np.int16),
                  "scalar": np.float32(2.5), "cursor": {}}
    return state, rank_state


def test_resume_rebuilds_the_saved_state_with_its_key_types_and_empty_dicts(tmp_path: Path
                                                                            ) -> None:
    state, rank_state = _rich_state()
    _save(tmp_path, 12, state, rank_state)
    resumed = AsyncCheckpointer(tmp_path).resume(resume_from="")
    assert resumed is not None and resumed.step == 12
    assert_same_state(state, resumed.state)
    assert_same_state(rank_state, resumed.rank_state)


def test_an_optimizer_resumed_without_a_template_continues_exactly(tmp_path: Path) -> None:
    model, opt = _trained()
    _save(tmp_path, 2, {"model": model.state_dict(), "optim": opt.state_dict()})
    resumed = AsyncCheckpointer(tmp_path).resume(resume_from="")
    assert resumed is not None
    model2 = _model()
    opt2 = torch.optim.AdamW(model2.parameters(), lr=0.1)
    model2.load_state_dict(resumed.state["model"])
    opt2.load_state_dict(resumed.state["optim"])
    batch = torch.randn(4, 6)
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m(batch).pow(2).mean().backward()
        o.step()
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_resume_into_a_template_loads_in_place(tmp_path: Path) -> None:
    model, _ = _trained()
    _save(tmp_path, 4, {"model": model.state_dict()}, rank_state={"seed": 1})
    fresh = _model()
    template = {"model": fresh.state_dict()}
    resumed = AsyncCheckpointer(tmp_path).resume(resume_from="", into=template)
    assert resumed is not None and resumed.state is template and resumed.rank_state == {"seed": 1}
    for a, b in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b)  # the module's own tensors were filled


def test_a_template_that_does_not_fit_is_a_mismatch_not_a_fallback(tmp_path: Path) -> None:
    _save(tmp_path, 1, {"model": {"w": torch.ones(2)}})
    _save(tmp_path, 2, {"model": {"w": torch.ones(2)}})
    with pytest.raises(CheckpointMismatch, match="step_00000002"):
        AsyncCheckpointer(tmp_path).resume(resume_from="", into={"model": {"v": torch.ones(2)}})


def test_a_corrupt_file_falls_back_to_the_previous_checkpoint_even_with_a_template(
        tmp_path: Path) -> None:
    _save(tmp_path, 1, {"w": torch.full((100,), 1.0)})
    step2 = _save(tmp_path, 2, {"w": torch.full((100,), 2.0)})
    data = step2 / "__0_0.distcp"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 1
    data.write_bytes(bytes(raw))
    template = {"w": torch.zeros(100)}
    resumed = AsyncCheckpointer(tmp_path).resume(resume_from="", into=template)
    assert resumed is not None and resumed.step == 1 and torch.equal(template["w"],
                                                                     torch.ones(100))


@pytest.mark.parametrize("state, message", [
    ({"x": object()}, r"cannot checkpoint object at state\.?x"),
    ({"x": {1: 1, "1": 2}}, "are the same key"),
    ({"x": {(1, 2): 3}}, "dict keys must be str or int"),
    ({"x": torch.ones(2).to_sparse()}, "dense tensors"),
    ({"rank_state": {}}, "rank_state"),
])
def test_unsavable_states_are_refused_at_save_naming_the_place(
        tmp_path: Path, state: dict, message: str) -> None:
    ck = AsyncCheckpointer(tmp_path)
    with pytest.raises((TypeError, ValueError), match=message):
        ck.save(1, state)
    assert not ck.busy


def test_strays_of_an_earlier_attempt_at_the_same_step_are_removed_at_commit(tmp_path: Path
                                                                             ) -> None:
    stale = tmp_path / "step_00000006"
    stale.mkdir()
    (stale / "__3_0.distcp").write_bytes(b"from a 4-rank attempt that crashed")
    _save(tmp_path, 6, {"w": torch.ones(2)})
    assert not (stale / "__3_0.distcp").exists()


class Evil:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {os.environ['ACME_TEST_MARKER']}",))


def test_resume_never_runs_code_from_a_checkpoint(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint whose manifest is consistent but whose values are a pickle that runs
    a command: resume refuses it, and the command never runs."""
    marker = tmp_path / "pwned"
    monkeypatch.setenv("ACME_TEST_MARKER", str(marker))
    step_dir = tmp_path / "ckpt" / "step_00000001"
    dcp.save({"x": Evil(), "w": torch.ones(2)}, checkpoint_id=step_dir, no_dist=True)
    assert not marker.exists()
    shards = []
    for f in sorted(p for p in step_dir.iterdir()):
        w = checksum_file(f)
        shards.append(ShardRecord(0, f.name, w.bytes, w.checksum))
    manifest = Manifest(step=1, format="dcp", world_size=1, created_ts=time.time(),
                        shards=tuple(shards))
    (step_dir / MANIFEST_NAME).write_text(manifest.to_json())
    with pytest.raises(CheckpointMismatch, match=r"Unpickl|weights_only|Weights only"):
        AsyncCheckpointer(tmp_path / "ckpt").resume(resume_from="")
    assert not marker.exists()
