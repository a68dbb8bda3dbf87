"""Registries: algorithm names → estimators, experiment names → runnable protocols."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fedviews.errors import ConfigError

__all__ = [
    "ExperimentSpec",
    "get_algorithm",
    "get_experiment",
    "list_algorithms",
    "list_experiments",
    "register_algorithm",
    "register_experiment",
]

T = TypeVar("T")

_ALGORITHMS: dict[str, Any] = {}
_EXPERIMENTS: dict[str, ExperimentSpec] = {}

# modules whose import registers algorithms / experiments (lazy: torch is optional)
_PROVIDERS = (
    "fedviews.linear",
    "fedviews.experiments.mmvfl",
    "fedviews.experiments.fedmv",
    "fedviews.experiments.multivfl",
    "fedviews.experiments.apfed",
    "fedviews.experiments.sfedmv",
)


@dataclass(frozen=True)
class ExperimentSpec:
    """A runnable protocol: its parameter dataclass and its run function.

    ``run(config, ctx) -> ExperimentResult`` (see :mod:`fedviews.experiments._runner`).
    ``needs`` names an optional extra (e.g. ``"torch"``) the experiment requires.
    """

    name: str
    params: type
    run: Callable[..., Any]
    description: str = ""
    default_dataset: str = "handwritten"
    needs: str | None = None


def register_algorithm(name: str) -> Callable[[T], T]:
    """Class decorator: make an estimator available under ``name``."""

    def deco(obj: T) -> T:
        _ALGORITHMS[name] = obj
        return obj

    return deco


def register_experiment(
    name: str,
    params: type,
    *,
    description: str = "",
    default_dataset: str = "handwritten",
    needs: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Function decorator: register an experiment protocol under ``name``."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        _EXPERIMENTS[name] = ExperimentSpec(name, params, fn, description, default_dataset, needs)
        return fn

    return deco


def _load_providers() -> None:
    import importlib

    for mod in _PROVIDERS:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            # a provider that is not written yet, or whose optional extra is missing
            if exc.name is None or not (exc.name.startswith("fedviews") or exc.name == "torch"):
                raise


def _lookup(table: dict[str, Any], name: str, what: str) -> Any:
    if name not in table:
        _load_providers()
    if name not in table:
        match = difflib.get_close_matches(name, list(table), n=1, cutoff=0.4)
        hint = f"; did you mean {match[0]!r}?" if match else f"; known: {sorted(table)}"
        raise ConfigError(f"unknown {what} {name!r}{hint}")
    return table[name]


def get_algorithm(name: str) -> Any:
    return _lookup(_ALGORITHMS, name, "algorithm")


def get_experiment(name: str) -> ExperimentSpec:
    spec: ExperimentSpec = _lookup(_EXPERIMENTS, name, "experiment")
    return spec


def list_algorithms() -> list[str]:
    _load_providers()
    return sorted(_ALGORITHMS)


def list_experiments() -> list[ExperimentSpec]:
    _load_providers()
    return [_EXPERIMENTS[k] for k in sorted(_EXPERIMENTS)]
