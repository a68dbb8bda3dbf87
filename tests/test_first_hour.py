"""The first hour of a new user (issue #35), in a temporary HOME and outside the repository.

The demo (``make demo``'s command on a shipped config, with overrides that make it take
seconds), ``fedviews report`` of its run, and the wheel installed into a fresh virtual
environment running a shipped config. The deployment recipe's commands are run as the docs page
writes them by ``tests/deploy/test_walkthrough.py``.
"""

from __future__ import annotations

import html
import json
import os
import re
import site
import subprocess
import sys
from pathlib import Path

import pytest

from fedviews.data import cache_dir

# the demo's config, small: 20 samples per class, 2 folds, 2 percentages, 1 beta
DEMO = "mmvfl_handwritten"
SMALL = ["params.n_per_class=20", "params.n_folds=2", "params.percents=[10,100]"]
SMALL += ["params.betas=[1e-3]"]
#: the ``fedviews`` command of the environment running the tests (the source tree's)
FEDVIEWS = Path(sys.executable).with_name("fedviews")


@pytest.fixture(scope="module")
def new_user(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a new user: an empty HOME and XDG folders, the machine's dataset cache
    (``FEDVIEWS_DATA``: nothing is downloaded) and no virtual environment active."""
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.pop("VIRTUAL_ENV", None)
    env.update(HOME=str(home), FEDVIEWS_DATA=str(cache_dir()), OMP_NUM_THREADS="1")
    for name, folder in [("CACHE", ".cache"), ("CONFIG", ".config"), ("DATA", ".local/share")]:
        (home / folder).mkdir(parents=True)
        env[f"XDG_{name}_HOME"] = str(home / folder)
    return env


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, new_user: dict[str, str]) -> Path:
    """``fedviews configs copy`` + ``fedviews run`` (``make demo``'s command) in an empty folder,
    by the source tree's ``fedviews``; the run's folder."""
    work = tmp_path_factory.mktemp("demo")
    _run([FEDVIEWS, "configs", "copy", DEMO], work, new_user)
    out = _run([FEDVIEWS, "run", f"{DEMO}.toml", *SMALL, "--out", "run", "-q"], work, new_user)
    assert f"report: {work / 'run' / 'report.html'}" in out.stdout
    return work / "run"


@pytest.mark.slow
def test_report_of_the_demo_prints_its_config(demo, new_user):
    """``fedviews report`` rewrites the demo's report, whose config table equals ``config.json``
    (the overrides included)."""
    config = json.loads((demo / "config.json").read_text())
    assert config["params"]["n_per_class"] == 20 and config["params"]["betas"] == [1e-3]
    (demo / "report.html").unlink()
    reported = _run([FEDVIEWS, "report", demo.name], demo.parent, new_user)
    assert f"report: {demo / 'report.html'}" in reported.stdout
    table = _config_table((demo / "report.html").read_text())
    assert table == {key: _as_reported(value) for key, value in _leaves(config)}


@pytest.mark.slow
def test_the_wheel_runs_a_shipped_config_in_a_fresh_venv(tmp_path, new_user, wheel, demo):
    """The wheel installed (offline, no dependencies) into a fresh venv; the venv's ``fedviews``
    runs the docs' ``fedviews run configs/NAME.toml`` in an empty folder from the wheel's copy,
    and measures the accuracies the source tree's demo measured."""
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
        timeout=120,
    )
    python = venv / "bin" / "python"
    env = {k: v for k, v in new_user.items() if k != "PYTHONPATH"}
    where = _run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path, env
    )
    purelib = Path(where.stdout.strip())
    # The dependencies are those of the interpreter running the tests (a venv's site-packages
    # is not the system's): its folders as plain paths, after the venv's own site-packages, so
    # that no .pth in them (an editable fedviews) is read.
    (purelib / "_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    pip = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed"]
    _run([*pip, wheel.path], tmp_path, env, silent=False)
    where = _run([python, "-c", "import fedviews; print(fedviews.__file__)"], tmp_path, env)
    assert Path(where.stdout.strip()).is_relative_to(purelib)

    work = tmp_path / "work"
    work.mkdir()
    cmd = [venv / "bin" / "fedviews", "run", f"configs/{DEMO}.toml", *SMALL, "--out", "run", "-q"]
    out = _run(cmd, work, env)
    shipped = purelib / "fedviews" / "configs" / f"{DEMO}.toml"
    assert f"configs/{DEMO}.toml: the shipped config {shipped}" in out.stdout
    assert f"{DEMO}: experiment mmvfl_feature_selection in " in out.stdout
    assert "over 2 folds" in out.stdout
    assert (work / "run" / "report.html").is_file()
    accuracy = json.loads((work / "run" / "metrics.json").read_text())["accuracy"]
    assert accuracy == json.loads((demo / "metrics.json").read_text())["accuracy"]
    means = [m for party in accuracy["mmvfl"].values() for m in party["mean"]]
    assert len(means) == 5 * 2 and min(means) > 100 / 10  # 5 parties x 2 percents; 10 classes


def _run(
    cmd: list, cwd: Path, env: dict[str, str], *, silent: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in ``cwd`` with ``env``; a failure shows its output. ``silent``: nothing on
    stderr either (no warning that a new user cannot act on)."""
    out = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )
    assert out.returncode == 0, f"{cmd}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert not silent or out.stderr == "", f"{cmd}:\n{out.stderr[-3000:]}"
    return out


def _config_table(page: str) -> dict[str, str]:
    """The report's config table (key -> value as printed)."""
    (table,) = re.findall(r"<table class='kv'>(.*?)</table>", page, re.S)
    rows = re.findall(r"<tr><td>(.*?)</td><td[^>]*>(.*?)</td></tr>", table)
    return {key: html.unescape(value) for key, value in rows}


def _leaves(config: dict, prefix: str = "") -> list[tuple[str, object]]:
    """``config`` flattened to (dotted key, value)."""
    out: list[tuple[str, object]] = []
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out += _leaves(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _as_reported(value: object) -> str:
    """A config value as the report prints it: strings as they are, other values as in JSON
    (TOML's spelling: ``true``, ``1000.0``, ``1e-05``), an empty value as ``—``."""
    if value in ("", [], {}, None):
        return "—"
    return value if isinstance(value, str) else json.dumps(value)
