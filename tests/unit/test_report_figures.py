"""The report's figures, inspected as matplotlib objects: every legend entry has
the colour of the bars and lines it names, and a workload type, a final state
or a failure origin has one colour in every figure.

Bars and lines that stand for a category value carry ``gid = "CATEGORY:VALUE"``
(see :mod:`slurm_acme.report.palette`); the test reads colours off the drawn
artists and the legend handles, not off the palette the code uses.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from matplotlib.colors import to_hex
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from test_report_compute import TDP, load_unique, make_data

from slurm_acme.report.compute import build_report
from slurm_acme.report.labels import legend_label
from slurm_acme.report.model import Report
from slurm_acme.report.period import Period
from slurm_acme.report.plots import FIGURES, build_figures
from slurm_acme.store.report import JobFilter


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Report:  # type: ignore[no-untyped-def]
    """All time on one cluster: three months (trends), failures, samples, compare."""
    from slurm_acme.store import open_store

    store = open_store(f"sqlite:///{tmp_path_factory.mktemp('figures') / 'acme.db'}")
    load_unique(store, make_data())
    made = build_report(store, JobFilter(cluster="seren"), Period(None, None, "all time"), tdp_watts=TDP,
                        compare=True)
    store.dispose()
    return made


def colour_of(artist: Any) -> str:
    if isinstance(artist, Line2D):
        return to_hex(artist.get_color())
    assert isinstance(artist, Patch), artist
    return to_hex(artist.get_facecolor())


def drawn(ax: Any) -> dict[str, set[str]]:
    """gid -> the colours of every artist drawn with it in ``ax``."""
    out: dict[str, set[str]] = defaultdict(set)
    for artist in [*ax.patches, *ax.lines]:
        if artist.get_gid():
            out[artist.get_gid()].add(colour_of(artist))
    return out


def test_every_figure_is_drawn_for_a_full_report(report: Report) -> None:
    assert sorted(build_figures(report)) == sorted(f.name for f in FIGURES)


def test_every_legend_entry_has_the_colour_of_what_it_names(report: Report) -> None:
    checked = 0
    for name, fig in build_figures(report).items():
        for ax in fig.axes:
            artists = drawn(ax)
            if not artists:
                continue
            legend = ax.get_legend()
            assert legend is not None, f"{name}: categories drawn without a legend"
            entries = {t.get_text(): colour_of(h) for t, h in zip(legend.get_texts(), legend.legend_handles,
                                                                   strict=True)}
            for artist_gid, colours in artists.items():
                category, value = artist_gid.split(":", 1)
                assert len(colours) == 1, f"{name}: {artist_gid} drawn in {colours}"
                text = legend_label(category, value)
                assert text in entries, f"{name}: {artist_gid} has no legend entry"
                assert entries[text] == next(iter(colours)), f"{name}: legend {text!r} vs bars of {artist_gid}"
                checked += 1
    assert checked > 40  # types, states, origins and series across ten figures


def test_a_category_value_has_one_colour_in_every_figure(report: Report) -> None:
    seen: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for name, fig in build_figures(report).items():
        for ax in fig.axes:
            for artist_gid, colours in drawn(ax).items():
                seen[artist_gid][name].update(colours)
    for artist_gid, by_figure in seen.items():
        colours = set().union(*by_figure.values())
        assert len(colours) == 1, f"{artist_gid}: {dict(by_figure)}"
    # the same type across figures, the same state across figures
    assert len(seen["type:Pretrain"]) >= 4 and len(seen["state:failed"]) >= 2


def test_the_final_states_bars_share_one_legend(report: Report) -> None:
    """The bug this guards: the *by GPU time* bar drawn in the next colours of
    the cycle while the legend matched only the *by count* bar."""
    ax = build_figures(report)["states"].axes[0]
    rows: dict[float, dict[str, str]] = defaultdict(dict)
    for patch in ax.patches:
        rows[round(patch.get_y(), 3)][patch.get_gid()] = colour_of(patch)
    by_count, by_time = rows.values()
    assert by_count == by_time and len(by_count) == 4
