"""The collector's /metrics exposition: dcgm-exporter's names, units and labels."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurm_acme.telemetry.exporter import MetricsServer

GIB = 2**30


def exposition(server: MetricsServer) -> dict[str, list]:
    text = generate_latest(server.registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_latest_tick_is_exposed_with_dcgm_exporter_names_and_hpc_job_labels():
    server = MetricsServer("127.0.0.1", 0)
    gpu = [{"cluster": "acme", "node": "gpu7", "ts": 1.0, "gpu_index": i, "gpu_uuid": f"GPU-{i}",
            "job_id": "99" if i == 1 else None, "util_percent": 87.0 if i == 1 else 0.0,
            "sm_active": 0.5, "mem_used_bytes": 40.0 * GIB, "mem_total_bytes": 80.0 * GIB, "power_w": 310.5,
            "temp_c": 61.0, "source": "nvml"} for i in range(2)]
    server.update(gpu, {"cluster": "acme", "node": "gpu7", "ts": 1.0, "cpu_percent": 12.5, "node_power_w": 2900.0})
    families = exposition(server)
    util = {s.labels["gpu"]: s for s in families["DCGM_FI_DEV_GPU_UTIL"]}
    assert util["1"].value == 87.0 and util["1"].labels["hpc_job"] == "99"
    assert util["0"].labels["hpc_job"] == "" and util["0"].value == 0.0
    assert util["1"].labels["Hostname"] == "gpu7" and util["1"].labels["UUID"] == "GPU-1"
    assert util["1"].labels["device"] == "nvidia1" and util["1"].timestamp is None  # Prometheus stamps scrapes
    assert families["DCGM_FI_DEV_FB_USED"][0].value == 40 * 1024  # MiB
    assert families["DCGM_FI_DEV_FB_FREE"][0].value == 40 * 1024
    assert families["DCGM_FI_PROF_SM_ACTIVE"][0].value == 0.5  # a ratio, as DCGM gives it
    assert families["DCGM_FI_DEV_POWER_USAGE"][0].value == 310.5
    assert families["acme_node_power_watts"][0].value == 2900.0
    assert "DCGM_FI_DEV_XID_ERRORS" not in families or not families["DCGM_FI_DEV_XID_ERRORS"]  # no reading, no sample


def test_the_server_binds_a_port_and_serves_metrics():
    import urllib.request

    server = MetricsServer("127.0.0.1", 0)
    port = server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            body = resp.read().decode()
        assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in body
    finally:
        server.close()
