"""Experiment configs: TOML files loaded into frozen dataclasses, with ``key=value`` overrides."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedviews._params import DEVICE, check_value
from fedviews._tables import (
    MODULES_HINT,
    build_dataclass,
    closest,
    coerce,
    import_modules,
    merge_tables,
    parse_overrides,
    read_toml,
)
from fedviews.errors import ConfigError


@dataclass(frozen=True)
class DataConfig:
    """Which dataset to load and the options passed to :func:`fedviews.data.load`."""

    name: str = "handwritten"
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExperimentConfig:
    """A whole experiment: what runs, on what data, with which parameters.

    ``params`` is the experiment's own frozen dataclass (see the registry), so
    every key is checked against what the experiment actually accepts.
    ``modules``: the modules the config imported before looking the experiment up
    (:func:`import_modules`; e.g. one that registers an experiment of its own).
    """

    experiment: str
    """The registered experiment to run (``fedviews experiments`` lists them)."""
    name: str
    """The run's name: its folder is ``<output_dir>/<name>-<timestamp>`` (default: the config file's
    stem).
    """
    seed: int = 0
    """Seed of the whole experiment (data splits, initialisations, batches), in ``[0, 2**31)``
    (experiments derive ``seed + k`` from it, and scikit-learn takes seeds below ``2**32``)."""
    data: DataConfig = field(default_factory=DataConfig)
    """The dataset: ``name`` plus the options of :func:`fedviews.data.load`."""
    params: Any = None
    """The experiment's own parameters (its ``Params`` dataclass, below)."""
    output_dir: str = "runs"
    """Where run folders are created."""
    device: str = "auto"
    """Torch device of the deep experiments: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"mps"``."""
    modules: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["data"] = {"name": self.data.name, **dict(self.data.options)}
        return out


def check_choice(name: str, value: str | Sequence[str], allowed: Sequence[str]) -> None:
    """Raise :class:`ConfigError` unless ``params.<name>`` is one of ``allowed`` (a string) or
    a non-empty list of them."""
    if isinstance(value, str):
        if value not in allowed:
            raise ConfigError(f"params.{name} must be one of {list(allowed)}, got {value!r}")
        return
    bad = [v for v in value if v not in allowed]
    if bad or not value:
        problem = f"unknown {name} {bad}" if bad else "none given"
        raise ConfigError(f"params.{name}: {problem}; choose from {list(allowed)}")


_TOP_KEYS = tuple(f.name for f in dataclasses.fields(ExperimentConfig))


def check_seed(seed: int, name: str) -> None:
    """A :class:`ConfigError` unless ``seed`` lies in ``[0, 2**31)`` (experiments derive
    ``seed + k`` from a seed, and scikit-learn takes seeds below ``2**32``)."""
    if not 0 <= seed < 2**31:
        raise ConfigError(f"{name} must lie in [0, 2**31), got {seed}")


def load_config(
    source: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()
) -> ExperimentConfig:
    """Load an experiment config from a TOML file (or a dict) and apply overrides.

    ``modules = [...]`` (optional): modules imported before the experiment is looked
    up, so that an experiment registered outside fedviews is found (:func:`import_modules`).

    Raises
    ------
    ConfigError
        For a missing/invalid file, unknown keys (naming the closest valid key),
        a module that cannot be imported, an unknown experiment name, values of
        the wrong type, or a seed outside ``[0, 2**31)``.
    """
    from fedviews.experiments._registry import get_experiment

    if isinstance(source, Mapping):
        raw: dict[str, Any] = dict(source)
        default_name = str(raw.get("experiment", "experiment"))
    else:
        path = Path(source)
        raw = read_toml(path)
        default_name = path.stem
    raw = merge_tables(raw, parse_overrides(overrides))
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(f"unknown key {key!r}{closest(key, _TOP_KEYS)}")
    if "experiment" not in raw:
        raise ConfigError(
            'the config must name its experiment, e.g. experiment = "mmvfl_feature_selection"'
        )
    modules = import_modules(raw.get("modules", []))
    try:
        spec = get_experiment(str(raw["experiment"]))
    except ConfigError as exc:
        raise ConfigError(f"{exc}{MODULES_HINT}") from None
    data_raw = coerce(raw.get("data", {}), dict, "data")
    data_name = coerce(data_raw.pop("name", spec.default_dataset), str, "data.name")
    seed = coerce(raw.get("seed", 0), int, "seed")
    check_seed(seed, "seed")
    name = coerce(raw.get("name", default_name), str, "name")
    output_dir = coerce(raw.get("output_dir", "runs"), str, "output_dir")
    device = coerce(raw.get("device", "auto"), str, "device")
    check_value("device", device, DEVICE)  # (an experiment without torch took "tpu")
    # last: the params' validate() may import the algorithm's package (keys and types first)
    params: Any = build_dataclass(
        spec.params, coerce(raw.get("params", {}), dict, "params"), "params"
    )
    return ExperimentConfig(
        experiment=spec.name,
        name=name,
        seed=seed,
        data=DataConfig(name=data_name, options=data_raw),
        params=params,
        output_dir=output_dir,
        device=device,
        modules=modules,
    )
