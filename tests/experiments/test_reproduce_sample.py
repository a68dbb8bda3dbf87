"""``fedviews reproduce --record`` keeps the run's cells; ``--check --sample K`` re-runs K of
them, takes the others from the record, and says where a fresh cell differs."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from _cli import fedviews
from test_reproduce import _copy_entry

from fedviews.errors import ConfigError, FedViewsError
from fedviews.experiments import RunContext, reproduce
from fedviews.experiments._render import render_markdown
from fedviews.experiments._reproduce import load_manifest
from fedviews.experiments._sessions import cell_changes, kept_cells

#: one cell per defense setting, a few seconds each
NAME = "defenses_vfedmv_smoke"


def _write_kept(path: Path, config: dict, cells: dict) -> None:
    path.write_bytes(gzip.compress(json.dumps({"config": config, "cells": cells}).encode()))


def test_a_record_keeps_its_cells_and_a_sample_of_them_checks_it(tmp_path, monkeypatch):
    manifest = _copy_entry(tmp_path, NAME)
    entry = load_manifest(manifest)[NAME]
    committed = json.loads((tmp_path / entry.results).read_text(encoding="utf-8"))
    out = reproduce(entry, tmp_path, out_dir=tmp_path / "rec", record=True)
    kept = tmp_path / entry.kept_cells
    assert kept.name == f"{NAME}.json.gz" and kept.parent.name == "cells"
    config, cells, took = kept_cells(entry, tmp_path)
    assert set(took) == set(cells) and all(t >= 0 for t in took.values())  # compute times
    assert out.kept == len(cells) >= 3 and cells == json.loads(
        (tmp_path / "rec" / "cells.json").read_text(encoding="utf-8")
    )
    assert config == json.loads((tmp_path / "rec" / "config.json").read_text(encoding="utf-8"))
    rec = json.loads((tmp_path / entry.results).read_text(encoding="utf-8"))
    assert rec["tables"] == committed["tables"]  # recording with cells changes no number
    sampled = f"`fedviews reproduce {NAME} --check --sample K`"
    assert sampled in render_markdown(entry, rec, kept=True)
    assert sampled not in render_markdown(entry, rec)
    assert kept.read_bytes()[4:8] == bytes(4)  # no time stamp in the gzip header
    reproduce(entry, tmp_path, out_dir=tmp_path / "rec2", record=True)
    _, again, took = kept_cells(entry, tmp_path)  # a deterministic run: the same cells but timings
    assert [line for key in cells for line in cell_changes(key, cells[key], again[key])] == []

    computed: list[str] = []
    cell = RunContext.cell

    def counted(self, key, compute):
        return cell(self, key, lambda: computed.append(key) or compute())

    monkeypatch.setattr(RunContext, "cell", counted)
    res = reproduce(entry, tmp_path, out_dir=tmp_path / "s", check=True, sample=2, sample_seed=7)
    assert computed == sorted(res.sampled, key=list(cells).index) and len(computed) == 2
    assert set(res.sampled) <= set(cells) and not res.drifts and not res.cell_changes
    assert (res.cells_compared, res.cells_changed) == (2, 0)
    assert res.sampled_seconds == pytest.approx(sum(took[k] for k in res.sampled))
    again = reproduce(entry, tmp_path, out_dir=tmp_path / "s2", check=True, sample=2, sample_seed=7)
    assert again.sampled == res.sampled  # the seed names the draw

    # the cells not drawn are the record's: a kept cell made up moves the tables, and a
    # drawn one that differs from the fresh run is named, leaf by leaf
    drawn, other = res.sampled[0], next(k for k in cells if k not in res.sampled)
    forged = json.loads(json.dumps(cells))
    forged[drawn] = json.loads(json.dumps(forged[drawn]).replace("0.", "0.0"))
    forged[other] = json.loads(json.dumps(forged[other]).replace("0.", "0.0"))
    _write_kept(kept, config, forged)
    res = reproduce(entry, tmp_path, out_dir=tmp_path / "f", check=True, sample=2, sample_seed=7)
    assert res.drifts, "a forged cell taken as recorded moves the committed tables"
    assert any(line.startswith(f"{drawn}: ") for line in res.cell_changes)
    assert not any(line.startswith(f"{other}: ") for line in res.cell_changes)

    # a whole check compares every fresh cell with the kept ones
    whole = reproduce(entry, tmp_path, out_dir=tmp_path / "w", check=True)
    assert (whole.cells_compared, whole.cells_changed) == (len(cells), 2) and not whole.sampled
    assert {line.split(": ")[0] for line in whole.cell_changes} == {drawn, other}
    assert not whole.drifts  # every cell fresh: the tables are the record's

    config["seed"] += 1  # cells of another config are refused
    _write_kept(kept, config, cells)
    with pytest.raises(FedViewsError, match="made by another config"):
        reproduce(entry, tmp_path, out_dir=tmp_path / "g", check=True, sample=1)
    with pytest.raises(ConfigError, match="--sample takes 1 to"):
        config["seed"] -= 1
        _write_kept(kept, config, cells)
        reproduce(entry, tmp_path, out_dir=tmp_path / "h", check=True, sample=len(cells) + 1)
    with pytest.raises(ConfigError, match="goes with --check"):
        reproduce(entry, tmp_path, out_dir=tmp_path / "i", record=True, sample=1)
    kept.unlink()
    with pytest.raises(FedViewsError, match="kept no cells.*--record"):
        reproduce(entry, tmp_path, out_dir=tmp_path / "j", check=True, sample=1)


def test_the_cli_samples_with_check_only_and_shows_the_draw(tmp_path):
    manifest = _copy_entry(tmp_path / "repo", NAME)
    r = fedviews("reproduce", NAME, "--sample", "1", "--manifest", str(manifest), cwd=tmp_path)
    assert r.returncode != 0 and "--sample K (K >= 1) and --sample-seed go with --check" in (
        r.stdout + r.stderr
    )
    args = ("reproduce", NAME, "-q", "--manifest", str(manifest), "--out", str(tmp_path / "o"))
    r = fedviews(*args, "--record", cwd=tmp_path)
    assert r.returncode == 0 and "cells kept)" in r.stdout, r.stdout + r.stderr
    r = fedviews("reproduce", "--list", "--manifest", str(manifest), cwd=tmp_path)
    assert "cells kept" in r.stdout, r.stdout
    args = (*args[:-1], str(tmp_path / "c"), "--check", "--sample", "1")
    r = fedviews(*args, "--sample-seed", "5", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # the drawn cell is named as re-run (it read as "the others as recorded: <it>")
    said = re.search(r"re-ran 1 cell: (.+) \(--sample 1 --sample-seed 5; recorded in ", r.stdout)
    assert said is not None and "the others are as recorded" in r.stdout, r.stdout
    assert "matches the committed results" in r.stdout and "cell changed" not in r.stdout


def test_cell_changes_name_each_leaf_but_the_timings():
    recorded = {"accuracy": [0.5, 0.75], "seconds": 3.0, "log": {"wall_seconds": 1.0, "n": 4}}
    same = {"accuracy": [0.5, 0.75], "seconds": 9.0, "log": {"wall_seconds": 2.0, "n": 4}}
    assert cell_changes("k", recorded, same) == []
    assert cell_changes("k", float("nan"), float("nan")) == []
    moved = {"accuracy": [0.5, 0.7], "seconds": 9.0, "log": {"n": 4.0}}
    assert cell_changes("k", recorded, moved) == [
        "k: accuracy/1: recorded 0.75, fresh 0.7",
        "k: log/n: recorded 4, fresh 4.0",  # an integer that became a float is a change
    ]
    many = cell_changes("k", list(range(6)), [x + 1 for x in range(6)], shown=2)
    assert many[-1] == "k: and 4 more" and len(many) == 3
    assert cell_changes("k", [1, 2], [1]) == ["k: value: recorded [1, 2], fresh [1]"]


def test_sampling_several_entries_skips_and_names_those_without_kept_cells(tmp_path):
    manifest = _copy_entry(tmp_path / "repo", NAME)
    other = "vfedmv_smoke"  # a record without kept cells (its experiment has no cells)
    copied = _copy_entry(tmp_path / "other", other)
    for rel in (load_manifest(copied)[other].config, load_manifest(copied)[other].results):
        (tmp_path / "repo" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / rel).write_bytes((tmp_path / "other" / rel).read_bytes())
    with open(manifest, "a", encoding="utf-8") as fh:
        fh.write("\n" + copied.read_text(encoding="utf-8"))
    base = ("reproduce", "-q", "--manifest", str(manifest))
    r = fedviews(*base, NAME, "--record", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    r = fedviews(*base, NAME, other, "--check", "--sample", "1", "--out", str(tmp_path / "c"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "re-ran 1 cell" in r.stdout and f"not checked: {other}: their records kept no" in (
        r.stdout
    )
    r = fedviews(*base, other, "--check", "--sample", "1", "--out", str(tmp_path / "d"))
    assert r.returncode != 0 and "kept no cells" in r.stdout + r.stderr
