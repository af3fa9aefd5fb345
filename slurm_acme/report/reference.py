"""The AcmeTrace summary rows (Seren, Kalos, Philly, Helios, PAI) shipped in
the package, so ``--compare`` works offline."""

from __future__ import annotations

import csv
import io
from importlib import resources

#: Columns of the summary that a report computes for its own cluster too.
COMPARE_COLUMNS = (
    "job_num", "cpu_job_num", "gpu_job_num",
    "avg_run_time_gpu", "avg_que_time_gpu", "avg_gpu_num",
    "med_run_time_gpu", "med_que_time_gpu", "med_gpu_num",
    "max_run_time_gpu", "max_gpu",
    "complete_rate_gpu", "cancel_rate_gpu", "fail_rate_gpu",
    "complete_rate_gpu_time", "cancel_rate_gpu_time", "fail_rate_gpu_time",
)


def reference_rows() -> list[dict[str, object]]:
    """One dict per reference cluster: ``cluster`` plus :data:`COMPARE_COLUMNS`
    as floats (``None`` where the source has no figure)."""
    text = resources.files("slurm_acme").joinpath("data/acme_cluster_summary.csv").read_text("utf-8")
    rows = []
    for raw in csv.DictReader(io.StringIO(text)):
        row: dict[str, object] = {"cluster": raw["id"], "source": "reference"}
        for col in COMPARE_COLUMNS:
            value = (raw.get(col) or "").strip()
            row[col] = float(value) if value else None
        rows.append(row)
    return rows
