"""The configs shipped in the wheel: ``fedviews configs list|copy``, ``fedviews run NAME``
outside the repository, and the wheel itself (configs, LICENSE, SPDX license)."""

from __future__ import annotations

import zipfile

import pytest
from _cli import ROOT, fedviews

CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("*.toml"))


def test_configs_list_and_copy_outside_the_repository(tmp_path):
    listed = fedviews("configs", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if "│" in line]
    assert all(row.rstrip().endswith("│") for row in rows)  # whole lines, none cut off
    names = {row.split("│")[1].strip() for row in rows} - {""}  # (a description wraps)
    assert names == {n.removesuffix(".toml") for n in CONFIGS}
    # a description is its first sentence, never cut: the CIFAR configs say how to run them
    listed_text = " ".join(row.split("│")[2].strip() for row in rows)
    assert "CIFAR cannot be downloaded by fedviews" in listed_text and "…" not in listed_text

    copied = fedviews("configs", "copy", "mmvfl_handwritten", cwd=tmp_path)
    assert copied.returncode == 0, copied.stderr
    text = (ROOT / "configs/mmvfl_handwritten.toml").read_text()
    assert (tmp_path / "mmvfl_handwritten.toml").read_text() == text
    again = fedviews("configs", "copy", "mmvfl_handwritten", cwd=tmp_path)
    assert again.returncode == 2 and "exists already" in again.stderr
    into = fedviews("configs", "copy", "mmvfl_handwritten.toml", "mine", cwd=tmp_path)
    assert into.returncode == 0 and (tmp_path / "mine/mmvfl_handwritten.toml").read_text() == text
    typo = fedviews("configs", "copy", "mmvfl_handwriten", cwd=tmp_path)
    assert typo.returncode == 2 and "did you mean 'mmvfl_handwritten'" in typo.stderr


@pytest.mark.parametrize("name", ["configs/mmvfl_handwritten.toml", "mmvfl_handwritten"])
def test_run_falls_back_to_a_shipped_config(tmp_path, name):
    """``fedviews run configs/NAME.toml`` (the docs' command) outside the repository runs the
    shipped config (here up to its config check: the override's key is unknown)."""
    out = fedviews("run", name, "params.no_such_key=1", cwd=tmp_path)
    assert out.returncode == 2
    assert "the shipped config" in out.stdout
    assert "unknown key params.no_such_key" in out.stderr
    missing = fedviews("run", "configs/no_such_config.toml", cwd=tmp_path)
    assert missing.returncode == 2 and "nor does a shipped config" in missing.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["launch"],
        ["predict", "--model", "nowhere"],
        ["coordinator"],
        ["flower", "launch"],
        ["split-data", "handwritten", "out", "--config"],
    ],
)
def test_deployment_commands_fall_back_to_a_shipped_config(tmp_path, command):
    """The deployment commands take a shipped config's name (or the docs' ``configs/NAME.toml``)
    outside the repository as ``fedviews run`` does (here up to the config check)."""
    name = "configs/deploy_vfedmv_handwritten.toml"
    if command[0] == "split-data":  # its config is an option; it takes no overrides
        out = fedviews(*command, name, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert "the shipped config" in out.stdout and (tmp_path / "out").is_dir()
        return
    out = fedviews(*command, name, "params.no_such_key=1", cwd=tmp_path)
    assert out.returncode == 2
    assert "the shipped config" in out.stdout
    assert "unknown key params.no_such_key" in out.stderr
    missing = fedviews(*command, "configs/no_such_config.toml", cwd=tmp_path)
    assert missing.returncode == 2 and "nor does a shipped config" in missing.stderr


@pytest.mark.slow
def test_the_wheel_ships_the_configs_and_the_license(wheel):
    """The wheel (built by the session's ``wheel`` fixture) lists the configs and the license."""
    assert "project.license" not in wheel.log  # setuptools' deprecation
    files = set(zipfile.ZipFile(wheel.path).namelist())
    assert {f"fedviews/configs/{n}" for n in CONFIGS} <= files
    (license_file,) = [f for f in files if f.endswith(".dist-info/licenses/LICENSE")]
    metadata = zipfile.ZipFile(wheel.path).read(
        license_file.replace("licenses/LICENSE", "METADATA")
    )
    assert b"License-Expression: MIT" in metadata


def test_run_by_name_takes_the_copy_beside_it(tmp_path):
    """``fedviews configs copy NAME``, edit ``NAME.toml``, ``fedviews run NAME``: the edited
    copy runs (it was the shipped config, silently), and the run says which file."""
    assert fedviews("configs", "copy", "mmvfl_handwritten", cwd=tmp_path).returncode == 0
    copy = tmp_path / "mmvfl_handwritten.toml"
    copy.write_text(copy.read_text() + "\n[not_a_table]\n")
    out = fedviews("run", "mmvfl_handwritten", cwd=tmp_path)
    assert out.returncode == 2
    said = " ".join(out.stdout.split())
    assert "mmvfl_handwritten: the file mmvfl_handwritten.toml" in said
    assert "not_a_table" in out.stderr  # the copy's own key was read
    shipped = fedviews("run", "configs/mmvfl_handwritten", "params.no_such_key=1", cwd=tmp_path)
    assert "the shipped config" in shipped.stdout
