"""Finding every kind of checkpoint a run has on disk, the trainer's own included."""

from __future__ import annotations

import zipfile
from pathlib import Path

from slurm_acme.ckpt import manifest
from slurm_acme.ft.checkpoints import find_checkpoints, step_in_name
from slurm_acme.ft.spec import DEFAULT_CHECKPOINT_GLOBS


def _zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", b"x" * 10)


def _dcp(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"shard")
    (path / ".metadata").write_bytes(b"meta")


def _acme(root: Path, step: int, *, committed: bool = True) -> Path:
    path = root / manifest.step_dir_name(step)
    path.mkdir(parents=True)
    (path / "rank00000.acme").write_bytes(b"12345")
    if committed:
        record = manifest.Manifest(step=step, format="acme", world_size=1, created_ts=1.0,
                                   shards=(manifest.ShardRecord(0, "rank00000.acme", 5, "c"),))
        (path / manifest.MANIFEST_NAME).write_text(record.to_json())
    return path


def test_step_is_the_last_number_in_the_name() -> None:
    assert step_in_name("epoch=1-step=500.ckpt") == 500
    assert step_in_name("checkpoint-500") == 500
    assert step_in_name("iter_0000100") == 100
    assert step_in_name("model_v2_step_30.pt") == 30
    assert step_in_name("latest.pt") is None


def test_every_kind_is_found_oldest_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    _zip(tmp_path / "model_step_10.pt")
    (tmp_path / "checkpoint-20").mkdir()
    _zip(tmp_path / "checkpoint-20" / "pytorch_model.bin")
    _dcp(tmp_path / "step-30")
    _acme(tmp_path, 40)
    found = find_checkpoints(tmp_path, DEFAULT_CHECKPOINT_GLOBS)
    assert [(c.step, c.kind) for c in found] == [(10, "torch"), (20, "torch"), (30, "dcp"), (40, "acme")]
    assert all(c.created_ts > 0 for c in found)


def test_incomplete_ones_are_left_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "model_step_10.pt").write_bytes(b"PK\x03\x04 truncated")
    (tmp_path / "model_step_11.pt").write_bytes(b"")
    (tmp_path / "step-30").mkdir()
    (tmp_path / "step-30" / "__0_0.distcp").write_bytes(b"no .metadata yet")
    _acme(tmp_path, 40, committed=False)
    (tmp_path / "latest.pt").write_bytes(b"no step in the name")
    assert find_checkpoints(tmp_path, DEFAULT_CHECKPOINT_GLOBS) == []


def test_dcp_folders_one_level_down_and_globs_limit_torch_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    _dcp(tmp_path / "checkpoint" / "step-100")  # torchtitan's layout
    _zip(tmp_path / "weights_5.safetensors.pt")
    found = find_checkpoints(tmp_path, ["ckpt_*.pt"])
    assert [(c.step, c.kind) for c in found] == [(100, "dcp")]


def test_a_missing_folder_has_no_checkpoints(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert find_checkpoints(tmp_path / "nope", DEFAULT_CHECKPOINT_GLOBS) == []


def test_retention_never_deletes_the_trainers_own_checkpoints(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from slurm_acme.ckpt.retention import prune

    _zip(tmp_path / "ckpt_step_000001.pt")
    _dcp(tmp_path / "step-2")
    (tmp_path / "checkpoint-3").mkdir()
    _zip(tmp_path / "checkpoint-3" / "pytorch_model.bin")
    for step in (10, 20, 30):
        _acme(tmp_path, step)
    prune(tmp_path, keep=1)
    found = find_checkpoints(tmp_path, DEFAULT_CHECKPOINT_GLOBS)
    assert [(c.step, c.kind) for c in found] == [(1, "torch"), (2, "dcp"), (3, "torch"), (30, "acme")]
