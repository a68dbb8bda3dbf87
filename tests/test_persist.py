"""Fitted estimators that pickle, joblib and save/load (issue #33), every estimator on tiny real data.

The estimators, their tiny parameters and data are those of ``test_estimators.py``
(:data:`CASES`); every round trip must predict exactly as the fitted estimator did.
"""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedviews.errors import ConfigError, DataError, NotFittedError
from test_estimators import CASES, IDS, Case

#: the outputs compared after a round trip (each case's own methods among them)
OUTPUTS = ("predict", "predict_proba", "decision_function", "transform", "predict_joint")


def _quiet(case: Case) -> dict[str, Any]:
    params = dict(case.params)
    if "verbose" in case.cls()().get_params():
        params["verbose"] = False
    return params


def _outputs(est: Any, case: Case, data: dict[str, Any]) -> dict[str, Any]:
    return {m: getattr(est, m)(*args(data)) for m, args in case.methods.items() if m in OUTPUTS}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


@pytest.fixture(scope="module", params=CASES, ids=IDS)
def fitted(request: pytest.FixtureRequest) -> Iterator[tuple[Case, Any, dict[str, Any]]]:
    case: Case = request.param
    if case.deep:
        torch = pytest.importorskip("torch")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
    est, data = case.cls()(**_quiet(case)), case.data()
    case.fit(est, data)
    yield case, est, data
    if case.deep:
        torch.set_num_threads(threads)


def _joblib_round_trip(est: Any) -> Any:
    joblib = pytest.importorskip("joblib")
    buf = io.BytesIO()
    joblib.dump(est, buf)
    buf.seek(0)
    return joblib.load(buf)


ROUND_TRIPS = {
    "pickle": lambda est, tmp: pickle.loads(pickle.dumps(est)),
    "joblib": lambda est, tmp: _joblib_round_trip(est),
    "save_load": lambda est, tmp: type(est).load(est.save(tmp / "model")),
}


@pytest.mark.parametrize("how", list(ROUND_TRIPS))
def test_round_trip_predicts_identically(
    fitted: tuple[Case, Any, dict[str, Any]], how: str, tmp_path: Path
) -> None:
    case, est, data = fitted
    expected = _outputs(est, case, data)  # (V-FedMV's testing phase adds to the log)
    summary = est.transport_.log.summary() if getattr(est, "transport_", None) else None
    twin = ROUND_TRIPS[how](est, tmp_path)
    assert type(twin) is type(est) and twin is not est
    assert twin.get_params().keys() == est.get_params().keys()
    # what users read of the run: the message log, its statistics, the history
    if summary is not None:
        assert twin.transport_.log.summary() == summary
        assert twin.transport_.log.to_records() == est.transport_.log.to_records()
        assert twin.transport_.policy == est.transport_.policy
        assert twin.run_stats_ == est.run_stats_
    for attr in ("history_", "classes_", "message_log_"):
        if hasattr(est, attr):
            assert repr(getattr(twin, attr)) == repr(getattr(est, attr))
    got = _outputs(twin, case, data)
    assert got.keys() == expected.keys() and expected
    for method, value in expected.items():
        assert _same(got[method], value), f"{case.name}.{method} differs after {how}"


def test_an_unpickled_vfedmv_runs_the_federated_testing_phase() -> None:
    """Its transport comes back in process with its parties: predict sends the test messages."""
    case = next(c for c in CASES if c.name == "VFedMV")
    data = case.data()
    est = case.fit(case.cls()(**case.params), data)
    twin = pickle.loads(pickle.dumps(est))
    before = twin.transport_.log.n_messages
    assert np.array_equal(twin.predict(data["Xs_test"]), est.predict(data["Xs_test"]))
    assert twin.transport_.log.n_messages > before
    assert twin.fed_.transport is twin.transport_ and twin.parties_[0].transport is twin.transport_


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fitted V-FedMV, saved."""
    case = next(c for c in CASES if c.name == "VFedMV")
    est = case.fit(case.cls()(**case.params), case.data())
    return Path(est.save(tmp_path_factory.mktemp("saved") / "vfedmv"))


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_load_refuses_another_estimator(saved: Path) -> None:
    from fedviews.linear import MMVFL

    with pytest.raises(ConfigError, match="holds a saved VFedMV, not a MMVFL; load it with VFedMV"):
        MMVFL.load(saved)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("format", "fedviews.estimator/0", "in format 'fedviews.estimator/0'"),
        ("fedviews_version", "0.0.1", "saved by fedviews 0.0.1"),
    ],
)
def test_load_refuses_another_format_or_version(
    saved: Path, tmp_path: Path, key: str, value: str, match: str
) -> None:
    from fedviews.linear import VFedMV

    folder = _copy(saved, tmp_path / "m")
    meta = json.loads((folder / "model.json").read_text())
    meta[key] = value
    (folder / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=match):
        VFedMV.load(folder)


def test_load_refuses_a_missing_or_damaged_file(saved: Path, tmp_path: Path) -> None:
    from fedviews.linear import VFedMV

    with pytest.raises(DataError, match="cannot read a saved estimator"):
        VFedMV.load(tmp_path / "nothing")
    folder = _copy(saved, tmp_path / "m")
    (folder / "arrays.npz").write_bytes(b"not a zip file")
    with pytest.raises(DataError, match="cannot read a saved estimator"):
        VFedMV.load(folder)
    folder = _copy(saved, tmp_path / "m2")
    meta = json.loads((folder / "model.json").read_text())
    meta["fitted"]["W_"] = {"__object__": "os.system"}
    (folder / "model.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="unknown value tagged '__object__'"):
        VFedMV.load(folder)
    del meta["fitted"]
    (folder / "model.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="incomplete or damaged"):
        VFedMV.load(folder)


def test_load_refuses_weights_of_another_shape(tmp_path: Path) -> None:
    """A network's weights that do not fit its architecture are a DataError, not torch's."""
    pytest.importorskip("torch")
    case = next(c for c in CASES if c.name == "SingleVL")
    est = case.fit(case.cls()(**case.params), case.data())
    folder = est.save(tmp_path / "m")
    arrays = dict(np.load(folder / "arrays.npz"))
    meta = json.loads((folder / "model.json").read_text())
    net = dict(meta["live"]["__dict__"])["modules"]["__dict__"]
    key = net[0][1]["__array__"]  # the first weight of the active network
    arrays[key] = np.zeros((1, *arrays[key].shape), arrays[key].dtype)
    np.savez(folder / "arrays.npz", **arrays)  # type: ignore[arg-type]
    with pytest.raises(DataError, match=r"checkpointed 'net' does not fit its network \(\['enc"):
        type(est).load(folder)


class _Boom:
    """Unpickling it would run code: a saved estimator's arrays never unpickle."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (pytest.fail, ("a saved estimator's arrays were unpickled",))


def test_load_never_unpickles_an_array(saved: Path, tmp_path: Path) -> None:
    from fedviews.linear import VFedMV

    folder = _copy(saved, tmp_path / "m")
    arrays = dict(np.load(folder / "arrays.npz"))
    arrays["a0"] = np.array([_Boom()], dtype=object)
    np.savez(folder / "arrays.npz", **arrays)  # type: ignore[arg-type]
    with pytest.raises(DataError, match="cannot read a saved estimator"):
        VFedMV.load(folder)


def test_save_refuses_an_unfitted_estimator_or_a_live_parameter(tmp_path: Path) -> None:
    from fedviews.linear import MMVFL

    with pytest.raises(NotFittedError):
        MMVFL().save(tmp_path / "m")
    case = next(c for c in CASES if c.name == "MMVFL")
    est = case.fit(MMVFL(**case.params, transport=lambda policy: None), case.data())
    with pytest.raises(ConfigError, match="cannot save parameter transport .*set_params"):
        est.save(tmp_path / "m")
    assert isinstance(est.set_params(transport=None).save(tmp_path / "m"), Path)


def test_linear_estimators_save_and_load_without_torch(saved: Path) -> None:
    """A saved V-FedMV loads and predicts in a process where torch cannot be imported."""
    code = f"""
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")

sys.meta_path.insert(0, NoTorch())
import numpy as np
from fedviews.linear import VFedMV

est = VFedMV.load({str(saved)!r})
print(est.predict([np.zeros((2, d)) for d in est.n_features_in_]).shape)
assert "torch" not in sys.modules
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(2,)"


def test_sfedmv_with_local_extractors_and_fusion_round_trips(tmp_path: Path) -> None:
    """Every client's own GRUs and its own LocalMVL (nested estimators) are saved and loaded."""
    case = next(c for c in CASES if c.name == "SFedMV")
    pytest.importorskip("torch")
    data = case.data()
    est = case.cls()(**case.params, extractors="local", fusion="local").fit(data["clients"])
    loaded = type(est).load(est.save(tmp_path / "m"))
    assert isinstance(loaded.fusion_, list) and len(loaded.extractors_) == len(est.extractors_)
    for client in range(len(est.extractors_)):
        expected = est.predict(data["views_test"], client=client)
        assert np.array_equal(loaded.predict(data["views_test"], client=client), expected)
        twin = pickle.loads(pickle.dumps(est))
        assert np.array_equal(twin.predict(data["views_test"], client=client), expected)


def test_a_loaded_apfed_exports_the_same_model(tmp_path: Path) -> None:
    """The active client of a loaded APFed is the fitted one: its export (weights, model.json)
    equals the fitted estimator's."""
    torch = pytest.importorskip("torch")
    case = next(c for c in CASES if c.name == "APFed")
    est = case.fit(case.cls()(**case.params), case.data())
    loaded = type(est).load(est.save(tmp_path / "saved"))
    a, b = est.export(tmp_path / "a"), loaded.export(tmp_path / "b")
    assert json.loads((a / "model.json").read_text()) == json.loads((b / "model.json").read_text())
    sa, sb = (torch.load(p / "active_model.pt", weights_only=True) for p in (a, b))
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_an_apfed_saved_before_fits_kept_input_shapes_loads(tmp_path: Path) -> None:
    """A save from before ``input_shapes_`` existed (fits took images only then) loads, the
    strips' shapes taken from the images' shape and the setting, and predicts as it did."""
    pytest.importorskip("torch")
    case = next(c for c in CASES if c.name == "APFed")
    data = case.data()
    est = case.fit(case.cls()(**case.params), data)
    folder = est.save(tmp_path / "saved")
    meta = json.loads((folder / "model.json").read_text())
    del meta["fitted"]["input_shapes_"]
    (folder / "model.json").write_text(json.dumps(meta))
    loaded = type(est).load(folder)
    assert loaded.input_shapes_ == est.input_shapes_
    predict = case.methods["predict"]
    assert np.array_equal(loaded.predict(*predict(data)), est.predict(*predict(data)))
