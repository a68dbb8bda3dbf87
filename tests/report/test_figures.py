"""The report's figures: labelled axes, every series visible, one legend."""

from __future__ import annotations

import re
from pathlib import Path

from fedviews.report import _figures, line_panels


def test_coinciding_series_stay_visible_under_one_shared_legend(monkeypatch, tmp_path: Path):
    """MMVFL's line used to hide under supFL's (same marker and style, drawn later) and only
    the first of the panels had a legend."""
    kept = []
    monkeypatch.setattr(_figures, "save_figure", lambda fig, path: kept.append(fig) or path)
    same = [80.0, 90.0, 91.0]
    panels = {f"party{k}": {"MMVFL": same, "supFL": same, "supMVLFL": same} for k in range(5)}
    line_panels(tmp_path / "p.png", [10, 50, 100], panels, xlabel="p (%)", ylabel="accuracy (%)")
    (fig,) = kept
    assert [[t.get_text() for t in leg.get_texts()] for leg in fig.legends] == [
        ["MMVFL", "supFL", "supMVLFL"]
    ]
    drawn = [ax for ax in fig.axes if ax.get_lines()]
    assert len(drawn) == 5
    for ax in drawn:
        assert ax.get_legend() is None and ax.get_ylabel() == "accuracy (%)"
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        styles = {(ln.get_marker(), ln.get_linestyle()) for ln in lines.values()}
        assert len(styles) == 3  # no two series look alike
        assert lines["MMVFL"].get_zorder() > lines["supFL"].get_zorder()  # the first on top
        assert lines["supFL"].get_markersize() > lines["MMVFL"].get_markersize()
    _figures.pyplot().close(fig)


def test_curves_have_their_quantity_on_the_y_axis():
    svg = _figures.curves_figure(
        {"mmvfl_objective_first_fit": {"": ([1.0, 2.0, 3.0], [9.0, 5.0, 4.0])}}, xlabel="iteration"
    )
    rotated = re.findall(r"<text[^>]*rotate\(-90[^>]*>([^<]*)</text>", svg)
    assert rotated == ["mmvfl objective first fit"]


def test_a_run_of_one_round_has_that_round_as_its_only_tick(monkeypatch):
    """A one-round deployment's curves were ticked 0.945, 0.960, ..., 1.050."""
    kept = []
    monkeypatch.setattr(_figures, "svg_of", lambda fig, plt: kept.append(fig) or "")
    _figures.curves_figure({"accuracy": {"": ([1], [0.62])}}, xlabel="round")
    (fig,) = kept
    (ax,) = [a for a in fig.axes if a.get_lines()]
    assert list(ax.get_xticks()) == [1.0]
    _figures.pyplot().close(fig)


def test_a_value_near_the_float_maximum_is_a_gap_not_a_crash(monkeypatch):
    """A party's reported objective of 1.7e308 (finite, so accepted) made the finished run's
    report fail with matplotlib's "arange: cannot compute length"."""
    kept = []
    svg_of = _figures.svg_of
    monkeypatch.setattr(_figures, "svg_of", lambda fig, plt: kept.append(fig) or svg_of(fig, plt))
    svg = _figures.curves_figure(
        {"objective": {"": ([1, 2, 3, 4], [4.2e4, 1.7e308, float("inf"), 2.0e4])}}, xlabel="round"
    )
    assert svg.startswith("<svg") or "<svg" in svg[:200]
    (ax,) = [a for a in kept[0].axes if a.get_lines()]
    (line,) = ax.get_lines()
    assert [str(v) for v in line.get_ydata()] == ["42000.0", "nan", "nan", "20000.0"]
