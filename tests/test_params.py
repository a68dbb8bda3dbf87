"""Parameters declared once (issue #32): every registered estimator's parameters are its
algorithm's ``Params`` fields with the same defaults (plus its own names, listed here), every
``Params`` field declares its constraint, and the one validator checks it."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from fedviews._params import (
    Checked,
    Constraint,
    check_params,
    check_value,
    constraints,
    spec,
)
from fedviews._registry import ESTIMATORS
from fedviews.errors import ConfigError
from fedviews.federation import ALGORITHMS, get_algorithm_spec

#: registered estimator → (its algorithm, its own names, the Params fields it lacks)
ESTIMATOR_PARAMS: dict[str, tuple[str, set[str], set[str]]] = {
    "mmvfl": ("mmvfl", {"label_owner", "random_state", "transport", "defense", "verbose"}, set()),
    "vfedmv": ("vfedmv", {"random_state", "transport", "defense", "verbose"}, {"evaluate"}),
    "hfedmv": ("hfedmv", {"random_state", "transport", "defense", "verbose"}, {"evaluate"}),
    "multivfl": (
        "multivfl",
        {
            "n_data_owners",
            "n_label_owners",
            "scenario",
            "samples_per_owner",
            "defense",
            "random_state",
            "log_entries",
            "verbose",
            "transport",
        },
        set(),
    ),
    "apfed": (
        "apfed",
        {"m", "i", "random_state", "transport", "verbose", "defense"},
        {"evaluate", "torch_threads"},
    ),
    # the active client alone: no passive loss or network, no wire between parties
    "singlevl": (
        "apfed",
        {"m", "i", "random_state", "transport", "verbose"},
        {
            "evaluate",
            "torch_threads",
            "variant",
            "recon_loss",
            "lam",
            "tau",
            "wire_activations",
            "wire_gradients",
            "topk_ratio",
            "decoder",
            "passive_encoder",
        },
    ),
    "splitnn": (
        "splitnn",
        {"n_parties", "label_owner", "random_state", "transport", "verbose", "defense"},
        {"evaluate"},
    ),
    "sfedmv": (
        "sfedmv",
        {"extractors", "fusion", "defense", "random_state", "transport", "verbose"},
        {"evaluate", "torch_threads"},
    ),
}
#: centralized or local baselines: no federated run, no ``Params``
WITHOUT_PARAMS = {"supfl", "supmvlfl", "mv_local", "single_view_fl", "tvfl"}


def test_every_registered_estimator_is_listed() -> None:
    assert set(ESTIMATORS.names()) == set(ESTIMATOR_PARAMS) | WITHOUT_PARAMS


@pytest.mark.parametrize("name", sorted(ESTIMATOR_PARAMS))
def test_estimator_parameters_are_its_params_fields(name: str) -> None:
    """Names and defaults: the estimator's explicit signature cannot drift from ``Params``."""
    algorithm, own, lacks = ESTIMATOR_PARAMS[name]
    Params = get_algorithm_spec(algorithm).Params
    fields = {f.name: f.default for f in dataclasses.fields(Params)}
    got = ESTIMATORS.get(name)().get_params()
    assert set(got) == (set(fields) - lacks) | own
    assert lacks <= set(fields) and not own & set(fields)
    for key in set(fields) - lacks:
        assert got[key] == fields[key], key


#: the centralized references (written from the equations) and their own keywords
REFERENCES = {
    "mmvfl": ("fedviews.linear.mmvfl.reference:mmvfl_centralized", {"label_owner", "random_state"}),
    "vfedmv": ("fedviews.linear.vfedmv.reference:vfedmv_centralized", {"random_state"}),
    "hfedmv": ("fedviews.linear.hfedmv.reference:hfedmv_centralized", {"random_state"}),
}


@pytest.mark.parametrize("algorithm", sorted(REFERENCES))
def test_a_references_keywords_are_params_fields_with_their_defaults(algorithm: str) -> None:
    import importlib
    import inspect

    where, own = REFERENCES[algorithm]
    module, name = where.split(":")
    keywords = {
        p.name: p.default
        for p in inspect.signature(
            getattr(importlib.import_module(module), name)
        ).parameters.values()
        if p.kind is p.KEYWORD_ONLY
    }
    fields = {f.name: f.default for f in dataclasses.fields(get_algorithm_spec(algorithm).Params)}
    assert own <= set(keywords) and set(keywords) - own <= set(fields)
    for key in set(keywords) - own:
        assert keywords[key] == fields[key], key


@pytest.mark.parametrize("algorithm", ALGORITHMS.names())
def test_every_params_field_declares_its_constraint(algorithm: str) -> None:
    Params = get_algorithm_spec(algorithm).Params
    assert issubclass(Params, Checked)
    declared = constraints(Params)
    unchecked = {
        # the server optimizer's settings, checked together by its factory (cross_check)
        "multivfl": {"optimizer", "server_lr", "beta1", "beta2", "tau"},
    }.get(algorithm, set())
    assert set(declared) == {f.name for f in dataclasses.fields(Params)} - unchecked
    Params().validate()  # the defaults fit their own constraints
    for name, c in declared.items():
        assert c.describe()
        with pytest.raises(ConfigError, match=rf"^{name} (must be|has)"):
            check_params(dataclasses.replace(Params(), **{name: _invalid(c)}))


def _invalid(c: Constraint) -> Any:
    """A value that breaks constraint ``c``."""
    if c.kind is bool or c.kind is str:
        return 1
    if c.low is not None:
        return c.low - 1
    return "x"


@pytest.mark.parametrize(
    ("meta", "good", "bad", "message"),
    [
        (spec(int, low=1), [1, np.int64(7)], [0, 1.5, True, "1", None], "an integer >= 1"),
        (
            spec(float, low=0, low_open=True),
            [1, 0.5, np.float32(2)],
            [0, -1.0, float("nan"), float("inf"), True, "1"],
            "a finite number > 0",
        ),
        (spec(float, low=0, finite=False), [0, float("inf")], [-1e-9, float("nan")], ">= 0"),
        (
            spec(float, low=0, high=1, high_open=True),
            [0, 0.99],
            [1, -0.1],
            "a finite number in [0, 1)",
        ),
        (spec(bool), [True, np.bool_(False)], [0, 1, "true"], "True or False"),
        (spec(str, choices=("a", "b")), ["a", "b"], ["c", 1, None], "one of ['a', 'b']"),
        (spec(str, pattern=r"cuda(:\d+)?"), ["cuda", "cuda:1"], ["cuda:", "xcuda", 3], None),
        (
            spec(float, low=0, low_open=True, per="view"),
            [1.0, (1.0, 2.0), [3, 4]],
            [(), (1.0, 0.0), (1.0, "a"), 0.0],
            "a finite number > 0, or one per view",
        ),
    ],
)
def test_a_constraint_accepts_and_refuses(
    meta: dict[str, Constraint], good: list[Any], bad: list[Any], message: str | None
) -> None:
    for value in good:
        check_value("p", value, meta)
    for value in bad:
        with pytest.raises(ConfigError, match=r"^p must be") as info:
            check_value("p", value, meta)
        assert message is None or message in str(info.value)


def test_a_per_party_list_is_checked_against_the_roster() -> None:
    meta = spec(float, low=0, per="passive party")
    check_value("lam", (1.0, 2.0), meta)
    with pytest.raises(ConfigError, match="^lam has 2 values but there are 3 passive parties$"):
        meta["fedviews.constraint"].check("lam", (1.0, 2.0), 3)


def test_the_validator_runs_the_cross_field_hook_after_the_fields() -> None:
    seen: list[int | None] = []

    @dataclasses.dataclass(frozen=True)
    class P(Checked):
        n: int = dataclasses.field(default=1, metadata=spec(int, low=1))

        def cross_check(self, n_parties: int | None) -> None:
            seen.append(n_parties)

    check_params(P(), 3)
    assert seen == [3]
    with pytest.raises(ConfigError, match="^n must be an integer >= 1, got 0$"):
        P(n=0).validate()
    assert seen == [3]  # a field that does not fit stops before the hook


def test_a_run_checks_its_params_once_with_the_roster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a run (the estimators' fit) and loading a deployment config each check the
    params once, with the per-party length of the roster (they were checked twice)."""
    from fedviews.data import PartyData
    from fedviews.deploy import load_deploy_config
    from fedviews.federation import Roster, RunSpec, build_in_process
    from fedviews.linear import MMVFLParams

    calls: list[int | None] = []
    monkeypatch.setattr(MMVFLParams, "cross_check", lambda self, n: calls.append(n))
    rng = np.random.default_rng(0)
    ids, y = np.arange(12), np.arange(12) % 3
    datas = {
        "u": PartyData(ids, rng.normal(size=(12, 3)), y),
        "v": PartyData(ids, rng.normal(size=(12, 2))),
    }
    run = RunSpec("mmvfl", MMVFLParams(max_iter=1), Roster(("u", "v"), label_owner="u"))
    build_in_process(run, datas)
    assert calls == [2]
    fed = {"parties": ["a", "b", "c"], "label_owner": "a"}
    load_deploy_config({"algorithm": "mmvfl", "federation": fed})
    assert calls == [2, 3]
