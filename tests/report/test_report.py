"""The HTML report of an experiment run and of a deployment, as Chromium renders it."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

from _runs import fedviews
from rich.console import Console

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


def test_report_of_a_folder_that_is_not_a_run(tmp_path: Path):
    import pytest

    from fedviews.errors import ConfigError

    with pytest.raises(ConfigError, match="is not a finished run"):
        write_report(tmp_path)
    (tmp_path / "error.json").write_text("{}")
    r = fedviews("report", tmp_path)
    assert r.exit_code == 2 and "it failed: see error.json" in r.stderr
    assert "Traceback" not in r.stderr
