"""The localhost walk-through of docs/deployment.md, run as the page writes it in an empty
folder: the recipe cannot rot (a renamed option, a path that the commands do not produce, a
wrong order, a file that only a clone of the repository has)."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("rbcl")  # the PSI

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "deployment.md"


def walkthrough_commands(text: str) -> list[list[str]]:
    """The commands of the ``bash`` blocks between ``<!-- walkthrough -->`` and
    ``<!-- /walkthrough -->``, one per line (``\\`` continues a line, ``#`` comments)."""
    section = text.split("<!-- walkthrough -->", 1)[1].split("<!-- /walkthrough -->", 1)[0]
    commands: list[list[str]] = []
    for block in section.split("```bash\n")[1:]:
        code = block.split("```", 1)[0].replace("\\\n", " ")
        commands += [shlex.split(line, comments=True) for line in code.splitlines()]
    return [c for c in commands if c]


def test_the_deployment_page_code_fits_the_width_of_the_site():
    """The built site clips a long code line (the recipe's `--certs ca --out ...` were hidden):
    a command longer than this is broken with `\\`."""
    fenced, long = False, []
    for line in PAGE.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced and len(line) > 88:
            long.append(line)
    assert not long


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def test_the_localhost_walkthrough_runs_as_written(tmp_path):
    commands = walkthrough_commands(PAGE.read_text())
    assert [c[:2] for c in commands[-3:]] == [
        ["fedviews", "coordinator"],
        ["fedviews", "party"],
        ["fedviews", "party"],
    ]
    assert all(c[0] == "fedviews" for c in commands)
    assert commands[0][:3] == ["fedviews", "configs", "copy"]  # the config comes with fedviews
    port = str(_free_port())  # the page's 50051 may be taken by another run on this machine

    def argv(command: list[str]) -> list[str]:
        args = [a.replace("50051", port) for a in command[1:]]
        return [sys.executable, "-m", "fedviews", *args]

    for command in commands[:-3]:  # the files: one after the other
        done = subprocess.run(argv(command), cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    # the three terminals at once; the parties wait for the coordinator if they come first
    procs = [
        subprocess.Popen(
            argv(c), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for c in commands[-3:]
    ]
    try:
        outs = [p.communicate(timeout=400)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out
    coord = outs[0]
    assert "[coordinator] ok; results in run/coordinator" in coord
    res = json.loads((tmp_path / "run" / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok" and len(res["objective"]) >= 1
    for party, out in zip(("pix", "fou"), outs[1:], strict=True):
        assert f"[{party}] finished; results in run/{party}" in out
        assert (tmp_path / "run" / party / "result.npz").is_file()
    # the files the page says the first block writes
    config = commands[0][3]
    shipped = (ROOT / "configs" / f"{config}.toml").read_text()
    assert (tmp_path / f"{config}.toml").read_text() == shipped
    named = ["ca.crt", "ca.key", "coordinator.crt", "coordinator.key"]
    named += ["pix.crt", "pix.key", "fou.crt", "fou.key"]
    assert all((tmp_path / "ca" / f).is_file() for f in named)
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["fou.npz", "pix.npz"]
