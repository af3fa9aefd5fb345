"""One colour per category value, the same in every figure.

A workload type, a final state or a failure origin keeps its colour across
the report, so a reader who learned that pretraining is vermilion in the
workload mix finds it vermilion in the run-time CDF and in the trends. Colours
are from the Okabe-Ito colour-blind-safe set where they fit.

Every drawn bar or line that stands for a category value carries
``gid = "CATEGORY:VALUE"`` (see :func:`gid`), so tests can check a figure's
legend against what it drew.
"""

from __future__ import annotations

#: Workload types (plus ``overall``, the line of all types together).
TYPE_COLOURS = {
    "Eval": "#0072B2",      # blue
    "Pretrain": "#D55E00",  # vermilion
    "SFT": "#009E73",       # bluish green
    "MLLM": "#CC79A7",      # reddish purple
    "Debug": "#E69F00",     # orange
    "Other": "#7F7F7F",     # grey
    "overall": "#000000",
}
#: Final-state classes (``states`` keys).
STATE_COLOURS = {
    "completed": "#009E73",
    "cancelled": "#E69F00",
    "failed": "#C0392B",
    "other": "#B0B0B0",
}
#: Failure origins (``failures`` ``origin``).
ORIGIN_COLOURS = {
    "infrastructure": "#882255",
    "framework": "#44AA99",
    "script": "#DDCC77",
    "unknown": "#B0B0B0",
}
#: This site and the reference clusters, where their distributions are overlaid.
CLUSTER_COLOURS = {
    "site": "#000000",
    "Seren": "#0072B2",
    "Kalos": "#E69F00",
    "Philly": "#009E73",
    "Helios": "#CC79A7",
    "PAI": "#7F7F7F",
}
#: Measures drawn side by side (trends, compare): one colour per measure.
SERIES_COLOURS = {
    "gpu_hours": "#332288",
    "gpu_time_cdf": "#332288",
    "run_time": "#332288",
    "queue": "#88CCEE",
    "failed_gpu_time_share": "#C0392B",
    "util_median": "#117733",
    "sm_active_median": "#999933",
    "this_site": "#000000",
    "reference": "#7F7F7F",
}
#: For values a palette does not list (a site's own workload type, a new origin).
_SPARE = ("#661100", "#6699CC", "#AA4499", "#117733", "#999933", "#332288", "#888888")

PALETTES = {"type": TYPE_COLOURS, "state": STATE_COLOURS, "origin": ORIGIN_COLOURS, "cluster": CLUSTER_COLOURS,
            "series": SERIES_COLOURS}


def colour(category: str, value: str) -> str:
    """The colour of ``value`` in ``category`` (``type``, ``state``, ``origin``,
    ``cluster`` or ``series``); an unlisted value gets a stable spare colour."""
    palette = PALETTES[category]
    if value in palette:
        return palette[value]
    return _SPARE[sum(map(ord, value)) % len(_SPARE)]


def gid(category: str, value: str) -> str:
    """The artist id that names what a bar or line stands for."""
    return f"{category}:{value}"
