"""The example config, collector settings, and the CLI's answers to bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from slurm_acme.config import load_config
from slurm_acme.telemetry.settings import CollectorSettings

REPO = Path(__file__).resolve().parents[2]


def test_example_config_is_valid_and_keeps_synthetic_gpus_off():
    config = load_config(REPO / "etc" / "acme" / "acme.toml.example")
    assert config.telemetry.synthetic_gpus == 0
    assert config.telemetry.interval_s == 15.0


def test_settings_follow_config_and_flags(tmp_path):
    conf = tmp_path / "acme.toml"
    conf.write_text('[cluster]\nname = "kalos"\n[telemetry]\nspool_dir = "/x"\ninterval_s = 7\n')
    s = CollectorSettings.from_config(load_config(conf), node="gpu3", store_url="sqlite:///s.db",
                                      interval_s=None, spool_dir=str(tmp_path), synthetic_gpus=2)
    assert (s.cluster, s.node, s.telemetry.interval_s, s.telemetry.synthetic_gpus) == ("kalos", "gpu3", 7.0, 2)
    assert s.spool_url == f"sqlite:///{tmp_path}/gpu3/spool.db"
    assert s.marks_dir == tmp_path / "gpu3" / "marks"


def sacme(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_acme", *args], capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def test_bad_interval_is_a_one_line_usage_error(tmp_path):
    proc = sacme("--db", f"sqlite:///{tmp_path}/a.db", "collectd", "--interval", "0",
                 "--spool-dir", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "sacme: error: --interval must be positive (got 0.0)"


def test_unknown_telemetry_key_names_the_file_and_field(tmp_path):
    conf = tmp_path / "acme.toml"
    conf.write_text("[telemetry]\nsynthetic_gpu = 8\n")
    proc = sacme("--config", str(conf), "collectd", "--once", "--spool-dir", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"sacme: error: {conf}: unknown field 'telemetry.synthetic_gpu'"


def test_unknown_sampler_is_rejected(tmp_path):
    conf = tmp_path / "acme.toml"
    conf.write_text('[telemetry]\nsamplers = ["nvml", "rapl"]\n')
    proc = sacme("--config", str(conf), "collectd", "--once", "--spool-dir", str(tmp_path))
    assert proc.returncode == 2 and "telemetry.samplers.1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_flush_all_without_spool_folder_is_an_input_error(tmp_path):
    proc = sacme("--db", f"sqlite:///{tmp_path}/a.db", "collectd", "--spool-dir",
                 str(tmp_path / "none"), "flush", "--all")
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_once_samples_and_flushes_into_the_store(tmp_path):
    db = f"sqlite:///{tmp_path}/central.db"
    proc = sacme("--db", db, "collectd", "--once", "--node", "n9", "--synthetic-gpus", "2",
                 "--spool-dir", str(tmp_path / "spool"))
    assert proc.returncode == 0, proc.stderr
    from slurm_acme.store import open_store
    from slurm_acme.store import telemetry as tstore

    store = open_store(db)
    try:
        # 2 GPU-hours, 1 node-hour, and one cluster-hour row per metric (6 GPU + 5 node)
        assert tstore.count_rows(store) == {"gpu_samples": 2, "node_samples": 1, "job_nodes": 0,
                                            "job_summaries": 0, "gpu_hourly": 2, "node_hourly": 1,
                                            "cluster_hourly": 11}
    finally:
        store.dispose()
    assert "sampler synthetic on" in proc.stderr
