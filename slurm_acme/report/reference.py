"""The AcmeTrace summary rows (Seren, Kalos, Philly, Helios, PAI) shipped in
the package, so ``--compare`` works offline."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache
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
    as floats (``None`` where the source has no figure). Fresh dicts each call."""
    return [dict(row) for row in _reference_rows()]


@cache
def _reference_rows() -> tuple[dict[str, object], ...]:
    text = resources.files("slurm_acme").joinpath("data/acme_cluster_summary.csv").read_text("utf-8")
    rows = []
    for raw in csv.DictReader(io.StringIO(text)):
        row: dict[str, object] = {"cluster": raw["id"], "source": "reference"}
        for col in COMPARE_COLUMNS:
            value = (raw.get(col) or "").strip()
            row[col] = float(value) if value else None
        rows.append(row)
    return tuple(rows)


#: Where each reference figure comes from (findings cite these keys).
SOURCES = {
    "summary": "AcmeTrace cluster summary (Shanghai AI Laboratory, CC BY 4.0), shipped as "
               "slurm_acme/data/acme_cluster_summary.csv",
    "util_cdfs": "AcmeTrace utilisation CDFs (Shanghai AI Laboratory, CC BY 4.0), shipped as "
                 "slurm_acme/data/acme_util_cdfs.csv",
    "paper": 'Hu et al., "Characterization of Large Language Model Development in the Datacenter", NSDI \'24',
}
#: The AcmeTrace clusters, and the earlier clusters the paper compares them with.
ACME_CLUSTERS = ("Seren", "Kalos")
EARLIER_CLUSTERS = ("Philly", "Helios", "PAI")


@dataclass(frozen=True)
class PaperFigure:
    """One of the paper's headline numbers about Acme: ``value`` is a number
    or a ``(low, high)`` range (fractions for shares), ``None`` where the paper
    states it in words; ``text`` is how the paper puts it; ``where`` the part
    of the paper that shows it."""

    value: float | tuple[float, float] | None
    text: str
    where: str


#: The paper's findings that a site's report is read against.
PAPER = {
    "median_gpu_job_run_time": PaperFigure(None, "about 2 min, 1.7-7.2x shorter than Philly, Helios and PAI",
                                           "s3, Fig. 2"),
    "eval_gpu_job_share": PaperFigure(None, "most of the jobs", "s3, Fig. 4"),
    "eval_gpu_time_share": PaperFigure(None, "little of the GPU time", "s3, Fig. 4"),
    "eval_queue_median": PaperFigure(None, "the longest queueing delay of any type", "s3, Fig. 6"),
    "pretrain_gpu_job_share": PaperFigure(0.032, "under 3.2 % of jobs", "s3, Fig. 4"),
    "pretrain_gpu_time_share": PaperFigure((0.695, 0.94), "69.5-94 % of GPU time", "s3, Fig. 4"),
    "large_job_gpu_time_share": PaperFigure(0.96, "over 96 % of Kalos's GPU time in jobs of >= 256 GPUs",
                                            "s3, Fig. 3"),
    "infrastructure_failure_share": PaperFigure(0.11, "about 11 % of failures", "s5, Table 3"),
    "infrastructure_failed_gpu_time_share": PaperFigure(0.82, "over 82 % of the failed GPU time", "s5, Table 3"),
    "idle_gpu_power": PaperFigure(60.0, "about 60 W per idle GPU", "s4, Fig. 9"),
    "over_tdp_share": PaperFigure(None, "some GPUs draw more than their TDP", "s4, Fig. 9"),
}


def reference_row(cluster: str) -> dict[str, object]:
    """The summary row of one reference cluster (``KeyError`` if not shipped)."""
    for row in reference_rows():
        if row["cluster"] == cluster:
            return row
    raise KeyError(cluster)
