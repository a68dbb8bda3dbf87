"""The scikit-learn estimator contract of every fedviews estimator, on tiny real data.

* ``get_params`` / ``set_params`` / :func:`sklearn.base.clone` round-trip, and
  ``__init__`` only stores its parameters;
* using an estimator before ``fit`` raises :class:`fedviews.errors.NotFittedError`,
  which is also scikit-learn's ``NotFittedError``;
* ``fit`` leaves the global ``random``, numpy and torch random states as they were;
* a fitted estimator that ran a federation exposes ``transport_``, ``run_stats_``
  (``transport_.log.summary()``) and ``history_`` (one record per round or epoch);
* scikit-learn habits (issue #35): ``score`` is the accuracy of ``predict`` with its inputs,
  ``predict`` names the party it needs, ``help()`` has no metadata-routing boilerplate, and
  ``fit`` refuses a continuous ``y``, complex and sparse features with a ``DataError``
  naming the argument;
* ``verbose`` (issue #33): every iterative estimator shows its rounds on stderr when asked,
  nothing by default.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import io
import pydoc
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse
from sklearn.base import clone, is_classifier
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.utils.validation import check_is_fitted

from fedviews.errors import ConfigError, DataError, FedViewsError, NotFittedError
from fedviews.federation import Transport

Data = dict[str, Any]
Args = Callable[[Data], tuple[Any, ...]]

#: methods that need a fitted estimator (those an estimator defines must be listed in its case)
NEEDS_FIT = (
    "predict",
    "predict_proba",
    "predict_joint",
    "decision_function",
    "transform",
    "score",
    "export",
    "fit_fusion",
)


# --------------------------------------------------------------------------- tiny real data


def _std(X: np.ndarray) -> np.ndarray:
    sd = X.std(axis=0)
    sd[sd < 1e-12] = 1.0
    return (X - X.mean(axis=0)) / sd


@functools.cache
def _handwritten() -> Data:
    """60 Handwritten samples (6 per class, 3 standardised views): 40 to fit, 20 to predict."""
    from fedviews import data

    data.fetch("handwritten")
    ds = data.load("handwritten", views=["fou", "zer", "kar"])
    idx = np.random.default_rng(0).permutation(data.balanced_subsample(ds.y, 6, random_state=0))
    Xs, y = [_std(v[idx]) for v in ds.views], ds.y[idx]
    halves = (slice(0, 20), slice(20, 40))
    return {
        "Xs": [X[:40] for X in Xs],
        "y": y[:40],
        "clients": [([X[h] for X in Xs], y[h]) for h in halves],
        "Xs_test": [X[40:] for X in Xs],
        "y_test": y[40:],
    }


@functools.cache
def _fashion_mnist() -> Data:
    """80 Fashion-MNIST test images (8 per class): 60 to fit (6 per class), 20 to predict."""
    from fedviews import data

    ds = data.load("fashion_mnist", subset="test")
    idx = data.balanced_subsample(ds.y, 8, random_state=0)
    X, y = ds.images[idx], ds.y[idx]
    fit = np.isin(np.arange(len(y)), data.balanced_subsample(y, 6, random_state=0))
    return {"X": X[fit], "y": y[fit], "X_test": X[~fit], "y_test": y[~fit]}


@functools.cache
def _watch() -> Data:
    """20 smartwatch windows of each of the first two subjects, one subject per client."""
    from fedviews.data import load_sequences

    ds = load_sequences("watch")
    idx = np.concatenate([np.flatnonzero(ds.client_ids == s)[::2][:20] for s in ds.clients()[:2]])
    clients = ds.subset(idx).by_client()
    return {"clients": clients, "views_test": clients[1][0], "y_test": clients[1][1]}


# --------------------------------------------------------------------------- the estimators


@dataclass(frozen=True)
class Case:
    """One estimator: tiny non-default parameters, how to fit it, what needs a fitted one."""

    path: str  # "module.Class"
    params: dict[str, Any]  # non-default, and small enough for a quick fit
    data: Callable[[], Data]
    fit: Callable[[Any, Data], Any]
    methods: dict[str, Args]  # every method of NEEDS_FIT the class has -> its arguments
    rounds: int | None = None  # records in history_; None: a local estimator, no federation
    deep: bool = False

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]

    def cls(self) -> type:
        if self.deep:
            pytest.importorskip("torch")
        module, _, name = self.path.rpartition(".")
        cls: type = getattr(importlib.import_module(module), name)
        return cls


def _views_fit(est: Any, d: Data) -> Any:
    return est.fit(d["Xs"], d["y"])


def _clients_fit(est: Any, d: Data) -> Any:
    return est.fit(d["clients"])


def _images_fit(est: Any, d: Data) -> Any:
    return est.fit(d["X"], d["y"])


_PARTY_VIEW: dict[str, Args] = {
    "predict": lambda d: (d["Xs_test"][0], 0),
    "score": lambda d: (d["Xs_test"][0], d["y_test"], None, 0),
}
_ONE_VIEW: dict[str, Args] = {
    "predict": lambda d: (d["Xs_test"][0],),
    "score": lambda d: (d["Xs_test"][0], d["y_test"]),
}
_ALL_VIEWS: dict[str, Args] = {
    "predict": lambda d: (d["Xs_test"],),
    "decision_function": lambda d: (d["Xs_test"],),
    "score": lambda d: (d["Xs_test"], d["y_test"]),
}
_IMAGES: dict[str, Args] = {
    "predict": lambda d: (d["X_test"],),
    "predict_proba": lambda d: (d["X_test"],),
    "score": lambda d: (d["X_test"], d["y_test"]),
}
_ZETAS = [2.0, 8.0, 4.0]
_TORCH = {"batch_size": 16, "lr": 0.01, "device": "cpu", "random_state": 1}

CASES = [
    Case(
        "fedviews.linear.MMVFL",
        {"beta": [0.5, 1.0, 2.0], "zeta": 100.0, "eta": 100.0, "max_iter": 3, "tol": 0.0},
        _handwritten,
        _views_fit,
        _PARTY_VIEW,
        rounds=3,
    ),
    Case(
        "fedviews.linear.SupFL",
        {"beta": [0.5, 1.0, 2.0], "max_iter": 5},
        _handwritten,
        _views_fit,
        _PARTY_VIEW,
    ),
    Case(
        "fedviews.linear.SupMVLFL",
        {"beta": 2.0, "max_iter": 5, "tol": 1e-4},
        _handwritten,
        _views_fit,
        {**_PARTY_VIEW, "predict_joint": lambda d: (d["Xs_test"],)},
    ),
    Case(
        "fedviews.linear.VFedMV",
        {"zeta": _ZETAS, "max_iter": 3, "tol": 0.0, "inner_max_iter": 3, "random_state": 1},
        _handwritten,
        _views_fit,
        _ALL_VIEWS,
        rounds=3,
    ),
    Case(
        "fedviews.linear.LocalMVL",
        {"zeta": _ZETAS, "n_iter": 3, "inner_max_iter": 3, "random_state": 1},
        _handwritten,
        _views_fit,
        _ALL_VIEWS,
    ),
    Case(
        "fedviews.linear.HFedMV",
        {"zeta": _ZETAS, "n_rounds": 3, "local_iter": 1, "inner_max_iter": 3, "random_state": 1},
        _handwritten,
        _clients_fit,
        _ALL_VIEWS,
        rounds=3,
    ),
    Case(
        "fedviews.linear.SingleViewFL",
        {"beta": 2.0, "n_rounds": 3, "local_iter": 2, "random_state": 1},
        _handwritten,
        lambda est, d: est.fit([(Xs[0], y) for Xs, y in d["clients"]]),
        _ONE_VIEW,
        rounds=3,
    ),
    Case(
        "fedviews.deep.MultiVFL",
        {
            "n_data_owners": 2,
            "n_label_owners": 2,
            "rounds": 2,
            "local_optimizer": "sgd",
            "channels": 4,
            "top_channels": 8,
            "hidden": 16,
            **_TORCH,
        },
        _fashion_mnist,
        _images_fit,
        {"predict": _IMAGES["predict"], "score": _IMAGES["score"]},
        rounds=2,
        deep=True,
    ),
    Case(
        "fedviews.deep.APFed",
        {"variant": "C", "lam": 0.5, "tau": 0.3, "epochs": 2, **_TORCH},
        _fashion_mnist,
        _images_fit,
        {**_IMAGES, "export": lambda d: (d["tmp"] / "model",)},
        rounds=2,
        deep=True,
    ),
    Case(
        "fedviews.deep.SingleVL",
        {"epochs": 2, **_TORCH},
        _fashion_mnist,
        _images_fit,
        {**_IMAGES, "export": lambda d: (d["tmp"] / "model",)},
        rounds=2,
        deep=True,
    ),
    Case(
        "fedviews.deep.TVFL",
        {"fill": "mean", "epochs": 2, **_TORCH},
        _fashion_mnist,
        _images_fit,
        _IMAGES,
        rounds=2,
        deep=True,
    ),
    Case(
        "fedviews.deep.SplitNN",
        {"n_parties": 2, "label_owner": 1, "epochs": 2, "hidden": 16, **_TORCH},
        _fashion_mnist,
        _images_fit,
        {**_IMAGES, "decision_function": lambda d: (d["X_test"],)},
        rounds=2,
        deep=True,
    ),
    Case(
        "fedviews.deep.SFedMV",
        {
            "hidden_size": 8,
            "n_rounds": 2,
            "local_epochs": 1,
            "batch_size": 16,
            "fusion_rounds": 3,
            "random_state": 1,
        },
        _watch,
        _clients_fit,
        {
            "predict": lambda d: (d["views_test"],),
            "score": lambda d: (d["views_test"], d["y_test"]),
            "transform": lambda d: (d["views_test"],),
            "fit_fusion": lambda d: (d["clients"],),
        },
        rounds=2,
        deep=True,
    ),
]
IDS = [c.name for c in CASES]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny networks: more threads only add contention on a busy 2-core box."""
    if importlib.util.find_spec("torch") is None:
        yield
        return
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_get_params_set_params_and_clone_round_trip(case: Case) -> None:
    cls = case.cls()
    default = cls()
    assert clone(default).get_params() == default.get_params()
    est = cls(**case.params)
    params = est.get_params()
    assert {k: params[k] for k in case.params} == case.params
    twin = clone(est)
    assert twin is not est and type(twin) is cls
    assert twin.get_params() == params
    assert default.set_params(**case.params) is default
    assert default.get_params() == params
    with pytest.raises(ValueError, match="Invalid parameter"):
        default.set_params(no_such_parameter=1)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_init_only_stores_its_parameters(case: Case) -> None:
    """Any value is accepted and stored as it is: validation and derived state belong to fit."""
    cls = case.cls()
    names = list(cls().get_params())
    marks = {name: object() for name in names}
    est = cls(**marks)
    assert vars(est).keys() == marks.keys()
    assert all(getattr(est, name) is mark for name, mark in marks.items())


# --------------------------------------------------------------------------- before fit


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_use_before_fit_raises_not_fitted_error(case: Case, tmp_path: Path) -> None:
    cls = case.cls()
    assert set(case.methods) == {m for m in NEEDS_FIT if hasattr(cls, m)}
    d = {**case.data(), "tmp": tmp_path}
    for method, args in case.methods.items():
        with pytest.raises(NotFittedError, match=f"{case.name} is not fitted yet") as info:
            getattr(cls(**case.params), method)(*args(d))
        err = info.value
        assert isinstance(err, FedViewsError)
        assert isinstance(err, SklearnNotFittedError)
        assert isinstance(err, ValueError) and isinstance(err, AttributeError)
    assert not list(tmp_path.iterdir())  # export wrote nothing


# --------------------------------------------------------------------------- fitted


def _global_rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {
        "random": random.getstate(),
        "numpy": np.random.get_state(),  # noqa: NPY002 - the legacy global state is the point
    }
    if importlib.util.find_spec("torch") is not None:
        import torch

        states["torch"] = torch.random.get_rng_state()
    return states


def _same_rng_states(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys() or a["random"] != b["random"]:
        return False
    (kind_a, keys_a, *rest_a), (kind_b, keys_b, *rest_b) = a["numpy"], b["numpy"]
    if kind_a != kind_b or not np.array_equal(keys_a, keys_b) or rest_a != rest_b:
        return False
    return "torch" not in a or bool((a["torch"] == b["torch"]).all())


@dataclass
class Fitted:
    case: Case
    est: Any
    data: Data
    rng_before: dict[str, Any]
    rng_after: dict[str, Any]
    summary: dict[str, Any] | None  # transport_.log.summary() right after fit


@pytest.fixture(scope="module", params=CASES, ids=IDS)
def fitted(request: pytest.FixtureRequest) -> Fitted:
    """The case's estimator fitted once, with the global random states around its fit."""
    case: Case = request.param
    est, data = case.cls()(**case.params), case.data()
    saved = _global_rng_states()
    random.seed(11)  # states a reseeding estimator could not restore by chance
    np.random.seed(12)  # noqa: NPY002
    if "torch" in saved:
        import torch

        torch.manual_seed(13)
    try:
        before = _global_rng_states()
        assert case.fit(est, data) is est
        after = _global_rng_states()
    finally:
        random.setstate(saved["random"])
        np.random.set_state(saved["numpy"])  # noqa: NPY002
        if "torch" in saved:
            torch.random.set_rng_state(saved["torch"])
    transport = getattr(est, "transport_", None)
    summary = None if transport is None else transport.log.summary()
    return Fitted(case, est, data, before, after, summary)


def test_fit_leaves_the_global_random_states_unchanged(fitted: Fitted) -> None:
    assert _same_rng_states(fitted.rng_before, fitted.rng_after), (
        f"{fitted.case.name}.fit changed the global random state"
    )


def _n_records(history: Any) -> int:
    """Rounds in a history: a list of records, a dict of per-round lists, or per-view lists."""
    if isinstance(history, dict):
        lengths = {len(v) for v in history.values()}
    elif history and all(isinstance(h, list) for h in history):
        lengths = {len(h) for h in history}
    else:
        return len(history)
    assert len(lengths) == 1, f"records of different lengths: {history!r}"
    return lengths.pop()


def test_fitted_estimator_exposes_the_run(fitted: Fitted) -> None:
    est, case = fitted.est, fitted.case
    check_is_fitted(est)
    if case.rounds is None:  # computed in one place: no messages, nothing to report
        for attr in ("transport_", "run_stats_", "history_"):
            assert not hasattr(est, attr), f"{case.name} is local but has {attr}"
        return
    assert isinstance(est.transport_, Transport)
    assert fitted.summary is not None
    missing = {k: v for k, v in fitted.summary.items() if est.run_stats_.get(k) != v}
    assert not missing, f"run_stats_ differs from transport_.log.summary() in {missing}"
    assert fitted.summary["messages"] > 0 or case.name == "SingleVL"  # SingleVL: one party
    assert _n_records(est.history_) == case.rounds


def test_fitted_estimator_predicts_and_clones_unfitted(fitted: Fitted, tmp_path: Path) -> None:
    est, case = fitted.est, fitted.case
    d = {**fitted.data, "tmp": tmp_path}
    for method, args in case.methods.items():
        getattr(est, method)(*args(d))  # fitted: none of them raises
    twin = clone(est)
    assert twin.get_params() == est.get_params()
    method, args = next(iter(case.methods.items()))
    with pytest.raises(NotFittedError):
        getattr(twin, method)(*args(d))


# --------------------------------------------------------------------------- scikit-learn habits


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_help_has_no_metadata_routing_boilerplate(case: Case) -> None:
    """No generated ``set_fit_request``/``set_score_request``...: ``help()`` shows the estimator."""
    cls = case.cls()
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert not re.findall(r"set_\w+_request", text)
    assert cls().get_metadata_routing() is not None  # the machinery itself still works


def test_score_is_the_accuracy_of_predict(fitted: Fitted) -> None:
    """``score`` everywhere, with ``predict``'s input conventions (sklearn's ClassifierMixin)."""
    est, case, d = fitted.est, fitted.case, fitted.data
    assert is_classifier(est)
    args = case.methods["score"](d)
    predicted = est.predict(*case.methods["predict"](d))
    y = np.asarray(args[1])
    assert est.score(*args) == np.mean(predicted == y)
    weights = np.arange(1.0, len(y) + 1)
    weighted = est.score(args[0], y, weights, *args[3:])
    assert weighted == pytest.approx(np.average(predicted == y, weights=weights), abs=1e-15)
    with pytest.raises(DataError, match="one label per sample"):
        est.score(args[0], y[:-1], None, *args[3:])
    for bad in (-weights, "zero"):  # a TVFL fill given where the weights go, too
        with pytest.raises(DataError, match="sample_weight must be"):
            est.score(args[0], y, bad, *args[3:])


def test_predict_names_the_party_it_needs(fitted: Fitted) -> None:
    """Where every party predicts from its own view, predict without ``party=`` is ambiguous."""
    est, d = fitted.est, fitted.data
    if "party" not in inspect.signature(est.predict).parameters:
        pytest.skip("no per-party prediction")
    with pytest.raises(ConfigError, match=r"has 3 parties .* pass party=k"):
        est.predict(d["Xs_test"][0])
    with pytest.raises(ConfigError, match=r"party=3 is out of range"):
        est.score(d["Xs_test"][0], d["y_test"], party=3)


def _bad_input(d: Data, part: str, f: Callable[[Any], Any]) -> Data:
    """The training data with ``f`` applied to the labels (``part="y"``) or to the first
    feature array that a fit of the cases reads (``"X"``): ``Xs[0]``, ``X``, or client 0's
    first view (a 2-D array, or the first sequence of a sequence view)."""
    out = dict(d)
    if part == "y":
        out.update({k: f(d[k]) for k in ("y",) if k in d})
    else:
        out.update({k: f(d[k]) for k in ("X",) if k in d})
        if "Xs" in d:
            out["Xs"] = [f(d["Xs"][0]), *d["Xs"][1:]]
    if "clients" in d:
        (views, y), *rest = d["clients"]
        if part == "y":
            first = (views, f(y))
        elif isinstance(views[0], np.ndarray) and views[0].ndim == 2:
            first = ([f(views[0]), *views[1:]], y)
        else:  # a view of sequences
            first = ([[f(views[0][0]), *views[0][1:]], *views[1:]], y)
        out["clients"] = [first, *rest]
    return out


def _flat(X: Any) -> np.ndarray:
    """Images as the 2-D ``(n, pixels)`` matrix a sparse one would be (sparse is 2-D only)."""
    X = np.asarray(X)
    return X.reshape(len(X), -1)


#: what a fit refuses, and how its DataError starts (the argument it names)
BAD_INPUTS = {
    "continuous y": ("y", lambda y: np.linspace(0.0, 1.0, len(y)), r"holds continuous values"),
    "complex X": ("X", lambda X: np.asarray(X) * (1 + 1j), r"holds complex values"),
    "sparse X": ("X", lambda X: scipy.sparse.csr_matrix(_flat(X)), r"is a scipy.sparse"),
}
#: the argument a DataError names, per fit: its views, clients, images or sequences
ARGUMENT = r"^(y|Xs\[0\]|X|images|clients\[0\]\.(y|Xs\[0\]|views: view 0, sample 0)) "


@pytest.mark.parametrize("bad", list(BAD_INPUTS))
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_fit_refuses_continuous_complex_and_sparse_input(case: Case, bad: str) -> None:
    part, f, message = BAD_INPUTS[bad]
    est = case.cls()(**case.params)
    with pytest.raises(DataError, match=ARGUMENT + message):
        case.fit(est, _bad_input(case.data(), part, f))


#: the iterative estimators: every one that runs rounds (or epochs)
ITERATIVE = [c for c in CASES if c.rounds is not None]


@pytest.mark.parametrize("case", ITERATIVE, ids=[c.name for c in ITERATIVE])
def test_verbose_fit_shows_its_rounds_on_stderr(
    case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line per round with its loss or objective on stderr (no terminal here); nothing on
    stdout; nothing at all with the default ``verbose=False``."""
    cls, d = case.cls(), case.data()
    assert cls().verbose is False
    case.fit(cls(**case.params), d)
    assert capsys.readouterr() == ("", "")
    case.fit(cls(**case.params, verbose=True), d)
    out, err = capsys.readouterr()
    assert out == ""
    shown = (
        r"\[(\d+)/(\d+)\] (fusion )?(?:round|epoch) \d+(?:/\d+)?: .*(?:loss|objective) [-\d.e+]+"
    )
    rounds = re.findall(shown, err)
    done = [int(r) for r, _, _ in rounds]  # S-FedMV: rounds of every view, then the fusion's
    fused = [r for r, _, fusion in rounds if fusion]
    assert done == list(range(1, len(done) + 1))
    assert (len(done) - len(fused)) % case.rounds == 0
    assert len(fused) == case.params.get("fusion_rounds", 0)
    assert {int(total) for _, total, _ in rounds} == {len(done)}


def test_verbose_fit_draws_a_progress_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from fedviews import _console
    from fedviews.linear import MMVFL

    screen = io.StringIO()
    monkeypatch.setattr(_console, "err_console", Console(file=screen, force_terminal=True))
    d = _handwritten()
    MMVFL(max_iter=3, tol=0.0, verbose=True).fit(d["Xs"], d["y"])
    shown = screen.getvalue()
    assert "━" in shown and "3/3" in shown and "round 3: objective" in shown
