"""Finite but huge values name their sender, never its victim (``largest_input``).

A receiver refuses NaN and infinities, naming the sender; but a dishonest party that sends
finite values so large that what its peer computes from them overflows (activations of
3e38: the label owner's gradients become NaN; gradients of 3e38: the data owner's weights,
then its next activations) had its victim named, for the victim's message was the first that
was not finite. The honest victim now names the party whose input made it overflow: in one
process (the hand-over's check) and as it encodes the message (the path of gRPC and Flower).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _tamper import tampered  # noqa: E402
from _wire import WireTransport  # noqa: E402

from fedviews.data import PartyData  # noqa: E402
from fedviews.errors import ProtocolError  # noqa: E402
from fedviews.federation import (  # noqa: E402
    Party,
    Roster,
    RunSpec,
    build_in_process,
    largest_input,
)

HUGE = 3e38  # finite in float32 (max 3.4e38); twice it is not


def _images(n: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random 28x28 images (pixels 0..255) whose class (of 3) shows in both halves."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.random((n, 28, 28)).astype(np.float32) * 80
    for c in range(3):
        X[y == c, :, 4 + 8 * c : 8 + 8 * c] += 170
    return X, y


def _splitnn() -> tuple[dict[str, PartyData], RunSpec]:
    from fedviews.deep.splitnn.spec import SplitNNParams

    X, y = _images()
    ids = np.arange(len(y))
    datas = {"p": PartyData(ids, X[:, :14]), "a": PartyData(ids, X[:, 14:], y)}
    params = SplitNNParams(
        epochs=1, batch_size=16, lr=0.1, hidden=8, evaluate=False, device="cpu", top=_top
    )
    return datas, RunSpec("splitnn", params, Roster(("p", "a"), label_owner="a"), seed=3)


def _top(shape: tuple[int, ...], n_classes: int) -> Any:
    """The label owner's top model: a linear layer on every party's logits."""
    return torch.nn.Linear(shape[0], n_classes)


def _dishonest(monkeypatch: pytest.MonkeyPatch, who: str, name: str, bad: Any) -> None:
    """``who`` sends ``bad`` (a value, or a dtype) in every array ``name`` it sends."""
    honest = Party._message

    def message(self, receiver, kind, arrays, meta, round):
        arrays = dict(arrays or {})
        if self.name == who and name in arrays:
            arrays[name] = tampered(arrays[name], bad)
        return honest(self, receiver, kind, arrays, meta, round)

    monkeypatch.setattr(Party, "_message", message)


# (Multi-VFL's: tests/deep/test_multivfl.py::test_receivers_refuse_nan_or_non_float_values)
CASES = [
    # a passive party's huge logits: the label owner's top model, then its gradients
    (_splitnn, "p", "logits", "'p' sent 'logits' with values so large"),
    # a label owner's huge gradients: the passive party's weights, then its logits
    (_splitnn, "a", "grad_logits", "'a' sent 'grad_logits' with values so large"),
]


@pytest.mark.parametrize("wire", [False, True], ids=["handed-over", "encoded"])
@pytest.mark.parametrize(("make", "who", "name", "match"), CASES)
def test_huge_finite_values_name_their_sender_not_its_victim(
    monkeypatch, make, who, name, match, wire
):
    """In one process (the hand-over's check), and as the honest victim encodes its
    message (``WireTransport``: what a gRPC or Flower party does), the refusal names the
    party that sent the huge values. Before, the victim was named (e.g. "'a' sent
    'activation_grad' with NaN or infinite values")."""
    datas, run = make()
    _dishonest(monkeypatch, who, name, HUGE)
    kw = {"transport": WireTransport} if wire else {}
    with pytest.raises(ProtocolError, match=match) as err:
        build_in_process(run, datas, **kw)()
    assert err.value.party == who


@pytest.mark.parametrize(("make", "who", "name", "_"), CASES)
def test_a_nan_is_still_its_sender_s_whatever_its_inputs(monkeypatch, make, who, name, _):
    """A party that sends NaN itself is named, though its message carries the honest code's
    blame: its inputs are modest and explain nothing."""
    datas, run = make()
    _dishonest(monkeypatch, who, name, np.nan)
    with pytest.raises(ProtocolError, match=f"'{who}' sent '{name}' with NaN") as err:
        build_in_process(run, datas)()
    assert err.value.party == who


def test_apfed_names_the_party_whose_huge_values_overflowed_its_peer(monkeypatch):
    """APFed's active party's huge ``h_A`` makes a passive party's gradient overflow; a
    passive party's huge ``grad_h_A`` makes the active party's encoder, then its next
    ``h_A``, overflow: the sender of the huge values is named either way."""
    from fedviews.deep import APFed

    X, y = _images(48)
    kw = {"epochs": 1, "batch_size": 16, "lr": 0.01, "device": "cpu", "random_state": 3}
    for who, name in [("active", "h_A"), ("passive1", "grad_h_A")]:
        with monkeypatch.context() as m:
            _dishonest(m, who, name, HUGE)
            est = APFed(variant="R", m=2, i=2, lam=1.0).set_params(**kw)
            with pytest.raises(ProtocolError, match=f"'{who}' sent '{name}' with values so") as e:
                est.fit(X, y)
            assert e.value.party == who


def test_largest_input_names_only_a_huge_input_of_another_party():
    """The rule itself: the largest input in magnitude names its party if it is another's
    and huge; the party's own (largest, or not finite) and modest inputs name nobody else."""
    t = torch.tensor
    blame = largest_input("a", {"v": {"h": t([1.0, -2e30])}, "a": {"w": t(5.0)}})
    err = blame("g")
    assert err is not None and err.party == "v"
    assert "'v' sent 'h' with values so large (max |x| = 2e+30)" in str(err)
    assert "what 'a' computed from them ('g')" in str(err)
    assert largest_input("a", {"v": {"h": t([3.0])}, "a": {"w": t(1.0)}})("g") is None
    assert largest_input("a", {"v": {"h": t([2e30])}, "a": {"w": t(3e30)}})("g") is None
    assert largest_input("a", {"v": {"h": t([2e30])}, "a": {"w": t(float("nan"))}})("g") is None
    numpy = largest_input("a", {"v": {"h": np.full(3, -1e20)}, "a": {}})("g")
    assert numpy is not None and numpy.party == "v"
    assert largest_input("a", {})("g") is None


def test_failed_on_huge_input_names_only_another_party_s_huge_input():
    """A party's failure (its report, deployed; its own error, in one process: ``at``) on
    what was computed from huge inputs names the party that sent the largest, where that is
    another party's and huge; the failure of a party that nobody's values explain is its own."""
    from fedviews.errors import DataError, RemoteError
    from fedviews.federation import failed_on_huge_input

    report = RemoteError("a", "DataError", "the IRLS system is numerically singular")
    err = failed_on_huge_input(report, {"v": {"Z_k": np.array(2e19)}, "a": {"Z_k": np.ones(2)}})
    assert err is not None and err.party == "v"
    assert str(err).startswith("'v' sent 'Z_k' with values so large (max |x| = 2e+19) that 'a' ")
    assert "failed on what was computed from them (DataError: the IRLS system is" in str(err)
    assert failed_on_huge_input(report, {"v": {"Z_k": np.array(1e18)}}) is None  # not huge
    assert failed_on_huge_input(report, {"a": {"Z_k": np.array(1e30)}}) is None  # its own
    assert failed_on_huge_input(DataError("x"), {"v": {"Z_k": np.array(1e30)}}) is None  # who?


def test_one_huge_message_that_poisons_the_top_model_names_its_sender(monkeypatch):
    """A passive party's logits of 4.7e37 once (finite float32): the label owner's top model
    stepped on them, and its gradients overflowed batches later, when the logits at hand were
    modest: the label owner was named ("'a' sent 'grad_logits' with NaN"). The largest
    logits of the epoch so far are the inputs the label owner's blame compares."""
    datas, run = _splitnn()
    honest = Party._message
    sent = []

    def message(self, receiver, kind, arrays, meta, round):
        arrays = dict(arrays or {})
        if self.name == "p" and "logits" in arrays and not sent:
            t = arrays["logits"].detach()
            arrays["logits"] = t / t.abs().max() * 4.7e37
            sent.append(kind)
        return honest(self, receiver, kind, arrays, meta, round)

    monkeypatch.setattr(Party, "_message", message)
    with pytest.raises(ProtocolError, match=r"^'p' sent 'logits' with values so large") as err:
        build_in_process(run, datas)()
    assert err.value.party == "p" and sent
