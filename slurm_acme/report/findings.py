"""The headline findings: what this site's characterisation means, beside Acme's.

The paper leads with findings; so does every report. Each finding is computed
from the report's own sections (so it can never disagree with the tables),
set beside Acme's figure from the shipped AcmeTrace summary or the paper, and
written as one sentence with its number. A finding whose data is missing
stays in the list and says what is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slurm_acme.report.labels import duration
from slurm_acme.report.reference import ACME_CLUSTERS, EARLIER_CLUSTERS, PAPER, SOURCES, reference_row

_PAPER_SHORT = "Hu et al., NSDI '24"
_SUMMARY_SHORT = "AcmeTrace cluster summary"
_UTIL_SHORT = "AcmeTrace utilisation CDFs"


@dataclass(frozen=True)
class Finding:
    key: str
    label: str
    unit: str
    value: float | None
    text: str
    acme_value: float | list[float] | None
    acme_text: str
    source: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key, "label": self.label, "value": self.value, "unit": self.unit,
            "acme_value": self.acme_value, "acme_text": self.acme_text, "text": self.text,
            "source": self.source, "available": self.value is not None, "detail": self.detail,
        }


def pct(share: float) -> str:
    return f"{100 * share:.1f} %"


def _ordinal(n: int) -> str:
    return {1: "", 2: "second ", 3: "third "}.get(n, f"{n}th ")


def _paper(key: str, label: str, unit: str, value: float | None, text: str, *,
           detail: dict[str, Any] | None = None) -> Finding:
    """A finding whose Acme side is one of the paper's numbers."""
    ref = PAPER[key]
    acme = list(ref.value) if isinstance(ref.value, tuple) else ref.value
    return Finding(key, label, unit, value, text, acme, f"Acme: {ref.text}", f"{_PAPER_SHORT}, {ref.where}",
                   detail or {})


def _median_run_time(s: Mapping[str, Any]) -> Finding:
    v = s["overview"]["gpu_run_time_median_s"]
    acme = {c: float(reference_row(c)["med_run_time_gpu"]) for c in ACME_CLUSTERS}  # type: ignore[arg-type]
    earlier = {c: float(reference_row(c)["med_run_time_gpu"]) for c in EARLIER_CLUSTERS}  # type: ignore[arg-type]
    seren = acme["Seren"]
    acme_ratios = [earlier[c] / seren for c in EARLIER_CLUSTERS]
    names = ", ".join(EARLIER_CLUSTERS[:-1]) + f" and {EARLIER_CLUSTERS[-1]}"
    acme_text = (f"Acme: {', '.join(f'{c} {duration(m)}' for c, m in acme.items())}; {names}'s medians are "
                 f"{min(acme_ratios):.1f}-{max(acme_ratios):.1f}x Seren's")
    source = f"{_SUMMARY_SHORT}; {_PAPER_SHORT}, {PAPER['median_gpu_job_run_time'].where}"
    detail: dict[str, Any] = {}
    if v is None:
        text = "No GPU job in this period has a run time, so there is no median job length."
    elif v > 0:
        ratios = {c: earlier[c] / v for c in EARLIER_CLUSTERS}
        detail = {"earlier_median_ratio": ratios}
        text = (f"The median GPU job runs {duration(v)}; {names}'s medians are "
                f"{min(ratios.values()):.1f}-{max(ratios.values()):.1f}x as long.")
    else:
        text = "The median GPU job runs 0 s: most GPU jobs end as soon as they start."
    return Finding("median_gpu_job_run_time", "median GPU-job run time", "s", v, text,
                   [acme["Seren"], acme["Kalos"]], acme_text, source, detail)


def _share_rank(workload: Mapping[str, Any], wtype: str, key: str) -> int:
    """1 when ``wtype`` has the largest ``key`` share of any type, 2 if second, ..."""
    mine = workload[wtype][key] or 0.0
    return 1 + sum(1 for t, w in workload.items() if t != wtype and (w[key] or 0.0) > mine)


def _eval_jobs(s: Mapping[str, Any]) -> Finding:
    w = s["workload"]
    v = w["Eval"]["gpu_job_share"]
    if v is None:
        text = "No GPU jobs in this period, so there is no evaluation share."
    else:
        text = (f"Evaluation jobs are {pct(v)} of GPU jobs, the {_ordinal(_share_rank(w, 'Eval', 'gpu_job_share'))}"
                "largest share of any workload type.")
    return _paper("eval_gpu_job_share", "evaluation share of GPU jobs", "share", v, text)


def _eval_time(s: Mapping[str, Any]) -> Finding:
    w = s["workload"]["Eval"]
    v = w["gpu_time_share"]
    if v is None:
        text = "No GPU time in this period, so there is no evaluation share of it."
    else:
        text = f"Evaluation takes {pct(v)} of GPU time, against {pct(w['gpu_job_share'] or 0.0)} of GPU jobs."
    return _paper("eval_gpu_time_share", "evaluation share of GPU time", "share", v, text)


def _eval_queue(s: Mapping[str, Any]) -> Finding:
    d = s["durations"]
    queues = {t: b["queue"]["p50"] for t, b in d.items() if t != "overall" and b["queue"]["n"]}
    v = queues.get("Eval")
    if v is None:
        text = "No evaluation GPU job in this period has a queue delay to compare."
        detail: dict[str, Any] = {}
    else:
        rank = 1 + sum(1 for t, q in queues.items() if t != "Eval" and q > v)
        longest = max(queues, key=lambda t: queues[t])
        detail = {"median_queue_by_type_s": queues}
        if rank == 1:
            text = f"Evaluation jobs wait a median {duration(v)} to start, the longest of any workload type."
        else:
            text = (f"Evaluation jobs wait a median {duration(v)} to start, the {_ordinal(rank)}longest of any "
                    f"workload type ({longest}: {duration(queues[longest])}).")
    return _paper("eval_queue_median", "median queue delay of evaluation jobs", "s", v, text, detail=detail)


def _pretrain_jobs(s: Mapping[str, Any]) -> Finding:
    v = s["workload"]["Pretrain"]["gpu_job_share"]
    text = ("No GPU jobs in this period, so there is no pretraining share." if v is None
            else f"Pretraining is {pct(v)} of GPU jobs.")
    return _paper("pretrain_gpu_job_share", "pretraining share of GPU jobs", "share", v, text)


def _pretrain_time(s: Mapping[str, Any]) -> Finding:
    v = s["workload"]["Pretrain"]["gpu_time_share"]
    text = ("No GPU time in this period, so there is no pretraining share of it." if v is None
            else f"Pretraining takes {pct(v)} of GPU time.")
    return _paper("pretrain_gpu_time_share", "pretraining share of GPU time", "share", v, text)


def _large_jobs(s: Mapping[str, Any]) -> Finding:
    v = s["scale"]["share_gpu_time_ge_256"]
    text = ("No GPU time in this period, so there is no large-job share of it." if v is None
            else f"Jobs of 256 or more GPUs hold {pct(v)} of GPU time.")
    return _paper("large_job_gpu_time_share", "GPU time in jobs of >= 256 GPUs", "share", v, text)


def _infrastructure(s: Mapping[str, Any]) -> dict[str, Any] | None:
    failures = s["failures"]
    if failures is None:
        return None
    for row in failures["by_origin"]:
        if row["origin"] == "infrastructure":
            return row
    return {"count": 0.0, "gpu_time_share": 0.0 if any(r["gpu_time_share"] for r in failures["by_origin"]) else None}


_NO_FAILURES = ("No failures were recorded in this period (sacme submit's supervisor and "
                "sacme diagnose record them), so {what} is unknown.")


def _infra_count(s: Mapping[str, Any]) -> Finding:
    row = _infrastructure(s)
    if row is None:
        v, text = None, _NO_FAILURES.format(what="the infrastructure share of failures")
    else:
        v = row["count"] / s["failures"]["total"]
        total = s["failures"]["total"]
        text = f"Infrastructure failures are {pct(v)} of the {total:,.0f} failure{'' if total == 1 else 's'}."
    return _paper("infrastructure_failure_share", "infrastructure share of failures", "share", v, text)


def _infra_time(s: Mapping[str, Any]) -> Finding:
    row = _infrastructure(s)
    if row is None:
        v, text = None, _NO_FAILURES.format(what="the infrastructure share of failed GPU time")
    elif row["gpu_time_share"] is None:
        v, text = None, "The recorded failures carry no GPU time (GPUs x time to failure), so its split is unknown."
    else:
        v = row["gpu_time_share"]
        text = f"Infrastructure failures cost {pct(v)} of the failed GPU time."
    return _paper("infrastructure_failed_gpu_time_share", "infrastructure share of failed GPU time", "share", v,
                  text)


_NO_SAMPLES = "No GPU power samples in this period (the node collector records them), so {what} is unknown."


def _idle_power(s: Mapping[str, Any]) -> Finding:
    power = s["power"]
    v = power["idle_gpu_power_median_w"] if power else None
    if v is None:
        text = _NO_SAMPLES.format(what="idle GPU power")
    else:
        text = f"An idle GPU (0 % utilisation) still draws a median {v:,.0f} W."
    return _paper("idle_gpu_power", "median power of an idle GPU", "W", v, text)


def _acme_over_tdp() -> dict[str, float]:
    """Acme's share of GPU power samples at or above its GPUs' TDP, per cluster,
    from the shipped AcmeTrace utilisation CDFs (empty if not shipped)."""
    from slurm_acme.report.acme_util import ACME_TDP_W, reference

    out = {}
    for cluster in ACME_CLUSTERS:
        cdf = reference(cluster, "gpu_power")
        if cdf is not None:
            out[cluster] = 1.0 - cdf.share_below(ACME_TDP_W)
    return out


def _over_tdp(s: Mapping[str, Any]) -> Finding:
    from slurm_acme.report.acme_util import ACME_TDP_W

    power = s["power"]
    v = power["over_tdp_share"] if power else None
    if v is None:
        text = _NO_SAMPLES.format(what="the share of GPUs at or above TDP")
    else:
        text = f"{pct(v)} of GPU power samples are at or above the {power['tdp_w']:,.0f} W TDP."
    acme = _acme_over_tdp()
    if not acme:
        return _paper("over_tdp_share", "GPU power samples at or above TDP", "share", v, text)
    acme_text = ("Acme: " + ", ".join(f"{c} {pct(x)}" for c, x in acme.items())
                 + f" of GPU power samples at or above {ACME_TDP_W:,.0f} W")
    source = f"{_UTIL_SHORT}; {_PAPER_SHORT}, {PAPER['over_tdp_share'].where}"
    values = sorted(acme.values())
    return Finding("over_tdp_share", "GPU power samples at or above TDP", "share", v, text,
                   [values[0], values[-1]] if len(values) > 1 else values[0], acme_text, source,
                   {"acme_by_cluster": acme})


#: The findings in page order. A new finding is one function here.
FINDINGS: tuple[Callable[[Mapping[str, Any]], Finding], ...] = (
    _median_run_time, _eval_jobs, _eval_time, _eval_queue, _pretrain_jobs, _pretrain_time,
    _large_jobs, _infra_count, _infra_time, _idle_power, _over_tdp,
)


def findings(sections: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The findings of a report, from its computed ``sections`` (by key:
    ``overview``, ``workload``, ``durations``, ``scale``, ``failures``,
    ``power``), as JSON-ready dicts."""
    return [make(sections).to_json() for make in FINDINGS]


#: Full citations of the short ``source`` names findings carry.
CITATIONS = {_SUMMARY_SHORT: SOURCES["summary"], _UTIL_SHORT: SOURCES["util_cdfs"], _PAPER_SHORT: SOURCES["paper"]}
