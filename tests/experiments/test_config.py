import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedviews.errors import ConfigError
from fedviews.experiments import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_every_config_in_repo_loads():
    configs = sorted((ROOT / "configs").glob("*.toml"))
    assert configs
    for path in configs:
        if path.name.startswith("deploy_"):
            from fedviews.deploy._config import load_deploy_config

            assert load_deploy_config(path).name
            continue
        try:
            cfg = load_config(path)
        except ConfigError as exc:
            if "unknown experiment" in str(exc):
                pytest.skip(f"{path.name}: provider not importable here ({exc})")
            raise
        assert cfg.name


def test_overrides_and_types():
    cfg = load_config(
        ROOT / "configs/mmvfl_handwritten.toml",
        ["params.zeta=8", "seed=3", "params.betas=[0.1, 1]"],
    )
    assert cfg.params.zeta == 8.0 and cfg.seed == 3 and cfg.params.betas == (0.1, 1.0)
    assert cfg.data.name == "handwritten" and cfg.data.options["views"] == [
        "pix",
        "fou",
        "fac",
        "zer",
        "kar",
    ]
    with pytest.raises(ConfigError, match="did you mean 'zeta'"):
        load_config(ROOT / "configs/mmvfl_handwritten.toml", ["params.zetta=8"])
    with pytest.raises(ConfigError, match="did you mean 'seed'"):
        load_config(ROOT / "configs/mmvfl_handwritten.toml", ["sed=1"])
    with pytest.raises(ConfigError, match="expected a number"):
        load_config(ROOT / "configs/mmvfl_handwritten.toml", ["params.zeta=abc"])
    with pytest.raises(ConfigError, match="classifier"):
        load_config(ROOT / "configs/mmvfl_handwritten.toml", ["params.classifier=svm"])
    with pytest.raises(ConfigError, match="key=value"):
        load_config(ROOT / "configs/mmvfl_handwritten.toml", ["params.zeta"])
    # an experiment without torch took any device; a misspelt table dropped the paper's
    with pytest.raises(ConfigError, match="device must be 'auto', 'cpu'.*got 'tpu'"):
        load_config(ROOT / "configs/mmvfl_handwritten.toml", ["device=tpu"])
    with pytest.raises(ConfigError, match=r"paper_table must be one of \['', 'handwritten'"):
        load_config(ROOT / "configs/mmvfl_handwritten.toml", ["params.paper_table=handwriten"])
    with pytest.raises(ConfigError, match="paper_table must be one of"):
        load_config(ROOT / "configs/fedmv_vertical_handwritten.toml", ["params.paper_table=x"])


@pytest.mark.parametrize(
    ("override", "views"),
    [
        ("data.views=[pix,xyz]", ["pix", "xyz"]),  # as typed in a shell, which strips quotes
        ('data.views=["pix", "fou"]', ["pix", "fou"]),
        ("data.views=[ pix , fou, ]", ["pix", "fou"]),
        ("data.views=[]", []),
        ("data.views=pix", "pix"),
    ],
)
def test_list_overrides_of_strings(override, views):
    cfg = load_config(ROOT / "configs/mmvfl_handwritten.toml", [override])
    assert cfg.data.options["views"] == views
    assert load_config(
        ROOT / "configs/mmvfl_handwritten.toml", ["params.betas=[1, 2.5]"]
    ).params.betas == (1.0, 2.5)


@pytest.mark.parametrize(
    ("override", "problem"),
    [
        ("data.views=[pix,", "malformed list"),
        ("data.views=[pix fou]", "'pix fou' is not a value"),
        ("data.views=[pix,,fou]", "'' is not a value"),
        ('data.views=["pix,fou]', "malformed list"),
        ("data.views=[[pix],fou]", "malformed list"),
    ],
)
def test_malformed_list_overrides_are_refused(override, problem):
    with pytest.raises(ConfigError, match=re.escape(problem)):
        load_config(ROOT / "configs/mmvfl_handwritten.toml", [override])


def test_unknown_experiment_and_missing_file(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text('experiment = "mmvfl_feature_selectoin"\n')
    with pytest.raises(ConfigError, match="did you mean 'mmvfl_feature_selection'"):
        load_config(p)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    p.write_text("experiment = \n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(p)


def test_tables_and_seed_are_checked():
    """``data=abc`` / ``params=3`` and a seed scikit-learn refuses are config errors, not a
    ValueError/AttributeError or an sklearn traceback at run time."""
    path = ROOT / "configs/fedmv_vertical_handwritten.toml"
    with pytest.raises(ConfigError, match="data: expected a table"):
        load_config(path, ["data=abc"])
    with pytest.raises(ConfigError, match="params: expected a table"):
        load_config(path, ["params=3"])
    for seed in ("-1", "2147483648"):
        with pytest.raises(ConfigError, match=r"seed must lie in \[0, 2\*\*31\)"):
            load_config(path, [f"seed={seed}"])
    assert load_config(path, ["seed=2147483647"]).seed == 2**31 - 1


def test_a_config_is_checked_before_the_heavy_imports():
    """Every experiment and deployment config with an unknown key, or a value of the wrong
    type, fails without importing torch or scikit-learn: a config error is quick. The
    registries import only the providers up to the named entry's, and the linear packages
    load their estimators (scikit-learn) on first use only."""
    code = """
import sys, tomllib
from pathlib import Path
from fedviews.deploy import load_deploy_config
from fedviews.errors import ConfigError
from fedviews.experiments import load_config
for path in sorted(Path("configs").glob("*.toml")):
    load = load_deploy_config if "federation" in tomllib.loads(path.read_text()) else load_config
    for override, error in (("params.no_such_key=1", "unknown key"), ("seed=x", "integer")):
        try:
            load(path, [override])
        except ConfigError as exc:
            assert error in str(exc), exc
        else:
            raise AssertionError(path)
print(sorted(m for m in ("torch", "sklearn") if m in sys.modules))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
