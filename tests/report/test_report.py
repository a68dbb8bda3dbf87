"""The HTML report of an experiment run and of a deployment, as Chromium renders it."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from _runs import fedviews
from rich.console import Console

from fedviews._tables import tomllib  # tomli before Python 3.11
from fedviews.report import load_run, write_report
from fedviews.report._diagram import barrier_diagram, format_bytes


class _Page(HTMLParser):
    """Tags, figure classes and visible text of a rendered page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: Counter[str] = Counter()
        self.images: list[str] = []
        self.links: list[str] = []
        self.text: list[str] = []
        self.barrier_text: list[str] = []
        self._barrier = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags[tag] += 1
        if tag == "img":
            self.images.append(a.get("src") or "")
        if tag == "a":
            self.links.append(a.get("href") or "")
        if tag == "figure" and a.get("class") == "barrier":
            self._barrier = 1
        elif self._barrier and tag == "figure":
            self._barrier += 1

    def handle_endtag(self, tag: str) -> None:
        if self._barrier and tag == "figure":
            self._barrier -= 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._barrier:
            self.barrier_text.append(data)


def _parse(dom: str) -> _Page:
    assert "Traceback" not in dom
    page = _Page()
    page.feed(dom)
    text = " ".join(page.text)
    assert "<pre" not in dom and '{"' not in text and '"per_party"' not in text  # no raw JSON
    return page


def test_experiment_report_renders_diagram_tables_and_figures(mmvfl_run, render):
    page = _parse(render(mmvfl_run / "report.html"))
    log = json.loads((mmvfl_run / "message_log.json").read_text())
    barrier = " ".join(page.barrier_text)
    # one box per party and the arrays and bytes of every pair, as the message log counted them
    for k in range(5):
        assert f"party{k}" in barrier
        assert format_bytes(log["crossing_bytes"][f"party{k} -> coordinator"]) in barrier
    assert "Z_k" in barrier and "coordinator" in barrier
    assert page.tags["svg"] == 3  # diagram, per-round curves, traffic/time bars
    assert page.tags["table"] >= 5  # 2 result tables, crossings, per party, config
    assert any(src.startswith("data:image/png;base64,") for src in page.images)  # self-contained
    assert {"config.json", "metrics.json", "message_log.json"} <= set(page.links)
    text = " ".join(page.text)
    # display names in tables and legends (the config keeps the registry keys)
    assert "MMVFL - supFL (ours)" in text and "MMVFL - supfl" not in text
    # the caption says what the curve is: which stored values, against what
    assert "mmvfl objective first fit (mmvfl_objective_first_fit): the values metrics.json" in text


def test_tables_name_the_parties_as_the_diagram_and_config_do(mmvfl_run):
    """The tables said "participant 1-5" where the diagram, the message log and
    ``label_owner = 0`` say party0-4."""
    metrics = json.loads((mmvfl_run / "metrics.json").read_text())
    log = json.loads((mmvfl_run / "message_log.json").read_text())
    owner = json.loads((mmvfl_run / "config.json").read_text())["params"]["label_owner"]
    views = json.loads((mmvfl_run / "config.json").read_text())["data"]["views"]
    parties = sorted(p for p in log["per_party"] if p != "coordinator")
    first, table2 = metrics["tables"][:2]
    assert [row[0] for row in first["rows"]] == [f"{p} ({v})" for p, v in zip(parties, views)]
    assert table2["columns"][1:-1] == [row[0] for row in first["rows"]]
    assert f"label owner = {parties[owner]} ({views[owner]})" in first["note"]
    assert "participant" not in json.dumps(metrics["tables"])


def test_deployment_report_renders_from_the_coordinators_files(deployment_run, render):
    folder = deployment_run / "coordinator"
    page = _parse(render(folder / "report.html"))
    barrier = " ".join(page.barrier_text)
    for name in ("coordinator", "pix", "fou", "fac", "zer", "kar", "Z_k", "PSI"):
        assert name in barrier
    text = " ".join(page.text)
    assert "objective" in text and "federation.label_owner" in text and "kar" in text
    assert page.tags["svg"] >= 3 and page.tags["table"] >= 4
    assert {"results.json", "message_log.json", "config.json"} <= set(page.links)
    rec = load_run(deployment_run)  # a launch folder stands for its coordinator's
    assert rec.kind == "deployment" and rec.folder == folder and rec.what == "mmvfl"
    assert rec.results["status"] == "ok" and len(rec.curves()["objective"][""][1]) == 3


def test_a_party_report_shows_what_it_sent_and_received(deployment_run, render):
    page = _parse(render(write_report(deployment_run / "zer")))
    barrier = " ".join(page.barrier_text)
    assert "zer" in barrier and "Z_k" in barrier
    assert "pix -> coordinator" not in barrier  # the party only saw its own traffic


def test_the_diagram_draws_only_pairs_that_exchanged_messages():
    summary = {
        "per_party": {"a": {}, "b": {}, "coordinator": {}},
        "crossings": {"a -> coordinator": ["grad"], "coordinator -> b": ["update/0", "update/1"]},
        "crossing_bytes": {"a -> coordinator": 1500, "coordinator -> b": 2_500_000},
    }
    svg = barrier_diagram(summary)
    assert svg.startswith("<svg") and "grad" in svg and "1.5 kB" in svg
    assert "update/* (2)" in svg and "2.5 MB" in svg
    assert svg.count("1.5 kB") == 1 and "b -&gt; a" not in svg


def test_run_prints_a_clickable_report_link_and_a_summary(mmvfl_run, monkeypatch):
    import fedviews.cli as cli

    out = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=out, force_terminal=True, width=200))
    cli._show_report(mmvfl_run)
    printed = out.getvalue()
    uri = (mmvfl_run / "report.html").resolve().as_uri()
    assert "\x1b]8;id=" in printed and uri in printed  # an OSC 8 hyperlink to the report
    lines = re.sub(r"\x1b\[[0-9;]*m", "", printed).strip().splitlines()
    summary = lines[[i for i, line in enumerate(lines) if line.startswith("report: ")][0] + 1 :]
    assert summary[0].startswith("mmvfl_handwritten: experiment mmvfl_feature_selection in ")
    # one clause per line, indented, none cut mid-word (by a terminal narrower than the summary)
    assert len(summary) >= 3 and all(line.startswith("  ") for line in summary[1:])
    assert "messages" in summary[-1] and "MB across the privacy barrier" in summary[-1]
    # the message log is one fit's: the line and the report say whose (it was read as the run's)
    cfg = json.loads((mmvfl_run / "config.json").read_text())["params"]
    fits = cfg["n_folds"] * len(cfg["betas"]) * (1 + len(cfg["zeta_sweep"]))
    assert fits > 1 and summary[-1].endswith(f"in the first of this run's {fits} MMVFL fits")
    assert (
        f"messages in the first of this run&#x27;s {fits} MMVFL fits"
        in (mmvfl_run / "report.html").read_text()
    )


def test_report_of_a_folder_that_is_not_a_run(tmp_path: Path):
    from fedviews.errors import ConfigError

    with pytest.raises(ConfigError, match="is not a finished run"):
        write_report(tmp_path)
    (tmp_path / "error.json").write_text("{}")
    r = fedviews("report", tmp_path)
    assert r.exit_code == 2 and "it failed: see error.json" in r.stderr
    assert "Traceback" not in r.stderr


class _ConfigTable(HTMLParser):
    """The ``(key, value)`` rows of the report's config section, as text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in, self._cell = False, False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section":
            self._in = dict(attrs).get("id") == "config"
        elif self._in and tag == "tr":
            self.rows.append([])
        elif self._in and tag == "td":
            self._cell = True
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        self._cell = self._cell and tag != "td"
        self._in = self._in and tag != "section"

    def handle_data(self, data: str) -> None:
        if self._cell:
            self.rows[-1][-1] += data


def _leaves(obj: object, key: str = "") -> list[tuple[str, object]]:
    """Every leaf of a JSON value with its dotted key (an empty table is a leaf)."""
    if isinstance(obj, dict) and obj:
        return [leaf for k, v in obj.items() for leaf in _leaves(v, f"{key}.{k}" if key else k)]
    return [(key, obj)]


@pytest.mark.parametrize("run", ["mmvfl_run", "deployment_run"])
def test_config_table_shows_every_value_of_config_json(run, request):
    folder = load_run(request.getfixturevalue(run)).folder
    parser = _ConfigTable()
    parser.feed(write_report(folder).read_text(encoding="utf-8"))
    shown = dict(r for r in parser.rows if r)
    leaves = _leaves(json.loads((folder / "config.json").read_text()))
    assert set(shown) == {k for k, _ in leaves}
    for key, value in leaves:
        text = shown[key]
        if value in ("", None, [], {}):
            assert text == "—", key
        elif isinstance(value, str):
            assert text == value, key
        else:  # as the TOML has it: reads back to the very value (0.001, 1000.0, true)
            assert tomllib.loads(f"v = {text}")["v"] == value, (key, text)
    assert any(isinstance(v, float) and v and abs(v) < 0.01 for _, v in leaves)
    assert any(v == [] or v == {} for _, v in leaves) and any(v is True for _, v in leaves)


def _text_boxes(fig) -> list:
    """The window extents of every non-empty text of ``fig``, as drawn."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts]


def _deployment_summary(data_owners: int, label_owners: int) -> dict:
    """A Multi-VFL deployment's message-log summary: every party and the coordinator both
    ways (the PSI, the top model), every data owner and label owner both ways."""
    owners = [f"label{k}" for k in range(label_owners)]
    strips = [f"strip{k}" for k in range(data_owners)]
    crossings = {}
    for p in strips + owners:
        up = ["psi_blinded", "psi_count"] + (
            ["update/0.weight", "update/0.bias"] if p in owners else []
        )
        crossings[f"{p} -> coordinator"] = up
        crossings[f"coordinator -> {p}"] = ["psi_double"] + (
            ["top/0.weight"] if p in owners else []
        )
    for s in strips:
        for o in owners:
            crossings[f"{s} -> {o}"] = ["activations"]
            crossings[f"{o} -> {s}"] = ["activation_grad"]
    nbytes = {pair: 1_234_567 * (i + 1) for i, pair in enumerate(crossings)}
    parties = {p: {} for p in [*strips, *owners, "coordinator"]}
    return {"per_party": parties, "crossings": crossings, "crossing_bytes": nbytes}


@pytest.mark.parametrize(("data_owners", "label_owners"), [(4, 2), (6, 3)])
def test_many_pairs_no_two_labels_overlap(data_owners, label_owners, recwarn):
    """Multi-VFL's 28 pairs (4 data owners, 2 label owners) and 54 were a tangle of arrows
    and labels on top of each other."""
    from fedviews.report._diagram import barrier_figure

    summary = _deployment_summary(data_owners, label_owners)
    assert len(summary["crossings"]) in (28, 54)
    fig = barrier_figure(summary)
    shown = {t for t, _ in _text_boxes(fig)}
    for pair, nbytes in summary["crossing_bytes"].items():  # every pair's bytes, once
        assert sum(format_bytes(nbytes) in t for t in shown) == 1, pair
    _assert_apart(fig)
    barrier_diagram(summary, coordinator=None)  # drawn flat: tight_layout used to warn
    assert not [w for w in recwarn if "layout" in str(w.message)]


def test_the_graph_of_a_few_pairs_has_no_label_over_another(mmvfl_run):
    from fedviews.report._diagram import barrier_figure

    _assert_apart(barrier_figure(json.loads((mmvfl_run / "message_log.json").read_text())))


def _assert_apart(fig) -> None:
    """No two texts of ``fig`` overlap and every one is inside it; closes ``fig``."""
    from fedviews.report._figures import pyplot

    boxes = _text_boxes(fig)
    page = fig.bbox
    for k, (a, box) in enumerate(boxes):
        assert (
            page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
        ), a
        for b, other in boxes[k + 1 :]:
            w = min(box.x1, other.x1) - max(box.x0, other.x0)
            h = min(box.y1, other.y1) - max(box.y0, other.y0)
            assert w <= 0 or h <= 0, (a, b)
    pyplot().close(fig)
