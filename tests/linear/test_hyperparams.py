"""Invalid hyper-parameters of the linear estimators: a ConfigError at ``fit`` that names the
parameter, never a raw TypeError/ValueError from deep inside, never a silently accepted value."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from fedviews import data
from fedviews.errors import ConfigError
from fedviews.linear import MMVFL, HFedMV, LocalMVL, SingleViewFL, SupFL, SupMVLFL, VFedMV


@functools.cache
def _hw() -> tuple[list[np.ndarray], np.ndarray]:
    """40 Handwritten samples (4 per class), 2 views."""
    data.fetch("handwritten")
    ds = data.load("handwritten", views=["fou", "kar"])
    idx = data.balanced_subsample(ds.y, 4, random_state=0)
    return [v[idx] for v in ds.views], ds.y[idx]


def _fit(cls: type, params: dict[str, Any]) -> Any:
    Xs, y = _hw()
    est = cls(**params)
    if cls is HFedMV:
        return est.fit([([X[::2] for X in Xs], y[::2]), ([X[1::2] for X in Xs], y[1::2])])
    if cls is SingleViewFL:
        return est.fit([(Xs[0][::2], y[::2]), (Xs[0][1::2], y[1::2])])
    return est.fit(Xs, y)


_SMALL = {
    MMVFL: {"max_iter": 2},
    VFedMV: {"max_iter": 2},
    SupFL: {"max_iter": 2},
    SupMVLFL: {"max_iter": 2},
    LocalMVL: {"n_iter": 2},
    HFedMV: {"n_rounds": 2},
    SingleViewFL: {"n_rounds": 2},
}
_BAD: list[tuple[type, str, Any]] = [
    # before: raw ValueError / TypeError / OverflowError from int() or a comparison
    *[(MMVFL, "max_iter", v) for v in ("abc", None, float("nan"), float("inf"), 1.5)],
    (MMVFL, "inner_max_iter", 1.5),  # before: a PartyUnavailable wrapping a TypeError
    (MMVFL, "tol", "abc"),
    (MMVFL, "eps", None),
    (MMVFL, "eps", float("inf")),  # before: accepted, every prediction was class 0
    (MMVFL, "standardize", "none"),  # before: truthy, so it standardized
    (MMVFL, "beta", True),
    (VFedMV, "test_max_iter", 1.5),
    (VFedMV, "standardize", "pooled"),
    (SupFL, "tol", -1.0),  # before: accepted
    (SupFL, "tol", float("nan")),
    (SupFL, "max_iter", 1.5),
    (SupMVLFL, "eps", "abc"),
    (LocalMVL, "eta", -1.0),  # before: accepted, a negative label penalty
    (LocalMVL, "eta", float("nan")),  # before: accepted, every prediction was class 0
    (LocalMVL, "inner_max_iter", 1.5),
    (LocalMVL, "eps", float("inf")),
    (HFedMV, "n_rounds", 1.5),
    (HFedMV, "inner_tol", None),
    (SingleViewFL, "local_iter", float("nan")),
    (SingleViewFL, "eps", 0.0),
]


@pytest.mark.parametrize(
    ("cls", "name", "value"), _BAD, ids=[f"{c.__name__}-{n}-{v!r}" for c, n, v in _BAD]
)
def test_an_invalid_hyper_parameter_is_a_config_error_naming_it(
    cls: type, name: str, value: Any
) -> None:
    with pytest.raises(ConfigError, match=rf"^{name} must be"):
        _fit(cls, {**_SMALL[cls], name: value})


def test_the_tolerance_error_names_the_tolerance() -> None:
    with pytest.raises(ConfigError, match=r"^inner_tol must be a number >= 0, got -1"):
        _fit(SingleViewFL, {**_SMALL[SingleViewFL], "inner_tol": -1})
    with pytest.raises(ConfigError, match=r"^test_tol must be"):
        _fit(VFedMV, {**_SMALL[VFedMV], "test_tol": float("nan")})


def test_numpy_integers_and_large_tolerances_stay_valid() -> None:
    est = _fit(MMVFL, {"max_iter": np.int64(2), "tol": float("inf"), "eps": np.float32(1e-8)})
    assert est.converged_ and len(est.objective_) == 2  # tol = inf: stop at the first check
