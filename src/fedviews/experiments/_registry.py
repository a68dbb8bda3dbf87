"""Experiment names → runnable protocols; algorithm names → estimators (from :mod:`fedviews._registry`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedviews._registry import ESTIMATORS, Registry, register_estimator

#: an estimator registers itself in the layer below (algorithms never import experiments)
register_algorithm = register_estimator


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


# modules whose import registers experiments (lazy: torch is optional)
_EXPERIMENTS: Registry[ExperimentSpec] = Registry(
    "experiment",
    (
        "fedviews.experiments.mmvfl",
        "fedviews.experiments.fedmv",
        "fedviews.experiments.fedmv_figures",
        "fedviews.experiments.multivfl",
        "fedviews.experiments.apfed",
        "fedviews.experiments.privacy_audit",
        "fedviews.experiments.defense_sweep",
        "fedviews.experiments.sfedmv",  # last: its spec loads the linear solvers (scipy.linalg)
    ),
)


def register_experiment(
    name: str,
    params: type,
    *,
    description: str = "",
    default_dataset: str = "handwritten",
    needs: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Function decorator: register an experiment protocol under ``name`` (once)."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        _EXPERIMENTS.add(
            name, ExperimentSpec(name, params, fn, description, default_dataset, needs)
        )
        return fn

    return deco


def get_algorithm(name: str) -> Any:
    return ESTIMATORS.get(name)


def get_experiment(name: str) -> ExperimentSpec:
    return _EXPERIMENTS.get(name)


def list_algorithms() -> list[str]:
    return ESTIMATORS.names()


def list_experiments() -> list[ExperimentSpec]:
    return [_EXPERIMENTS.get(k) for k in _EXPERIMENTS.names()]
