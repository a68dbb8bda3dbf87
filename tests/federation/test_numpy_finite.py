"""A NaN or an infinity in a numpy array is refused on arrival by every transport, naming its
sender, also where the receiver's handler reads ``msg.arrays`` as they came (it used to be
checked only by ``Message.array``: a handler that read ``msg.arrays`` took NaN in and a
deployment ended "ok" with NaN weights)."""

from __future__ import annotations

import numpy as np
import pytest

from fedviews.errors import ProtocolError
from fedviews.federation import (
    Coordinator,
    Message,
    Party,
    PrivacyPolicy,
    federate,
    handles,
    largest_input,
)

POLICY = PrivacyPolicy.of(
    "finite", {("coordinator", "party"): ["x"], ("party", "coordinator"): ["h"]}
)


class Doubler(Party):
    """Answers ``double`` with twice what it got, read from ``msg.arrays`` as it came."""

    def __init__(self, name: str, poison: bool = False) -> None:
        super().__init__(name)
        self.poison, self.seen = poison, 0

    @handles("double")
    def on_double(self, msg: Message) -> Message:
        self.seen += 1
        h = 2 * msg.arrays["x"]
        if self.poison:
            h = h * np.array([1.0, np.nan, 1.0])
        return self.reply(msg, arrays={"h": h})


class Asker(Coordinator):
    def run(self) -> None:
        raise NotImplementedError


def test_a_nan_reply_is_refused_naming_its_sender_first_and_in_the_lean_path() -> None:
    c, a, b = Asker("c"), Doubler("a"), Doubler("b", poison=True)
    federate([c, a, b], POLICY)
    x = np.ones(3)
    for _ in range(2):  # the first message of its signature is checked in full, then by lane
        assert c.send("a", "double", {"x": x}).arrays["h"].tolist() == [2.0, 2.0, 2.0]
        with pytest.raises(ProtocolError, match="'b' sent 'h' with NaN or infinite") as err:
            c.send("b", "double", {"x": x})
        assert err.value.party == "b"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_nan_request_is_refused_before_its_receiver_handles_it(bad: float) -> None:
    c, a = Asker("c"), Doubler("a")
    federate([c, a], POLICY)
    c.send("a", "double", {"x": np.ones(3, np.float32)})
    for _ in range(2):  # in full (a new dtype), then by lane
        with pytest.raises(ProtocolError, match="'c' sent 'x' with NaN or infinite") as err:
            c.send("a", "double", {"x": np.array([1.0, bad, 0.0])})
        assert err.value.party == "c"
    assert a.seen == 1  # the victim never handled the poisoned requests


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_a_float64_sum_that_overflows_is_not_taken_for_a_nan() -> None:
    """The check sums first; a sum of finite values can overflow, and is then read again."""
    c, a = Asker("c"), Doubler("a")
    federate([c, a], POLICY)
    big = np.full(3, np.finfo(np.float64).max)
    assert np.isinf(2 * big).all()  # (the reply overflows: refused, naming a)
    with pytest.raises(ProtocolError, match="'a' sent 'h'"):
        c.send("a", "double", {"x": big})
    assert a.seen == 1  # the request itself, finite, was taken


# -- what else a security review made a peer send (each refused, naming the sender) -------


def test_a_json_bomb_from_a_peer_is_malformed_json() -> None:
    """JSON nested too deeply (in a sealed meta table, a key bundle) raised a RecursionError
    in the receiving party's thread; it is malformed JSON now, which every reader refuses
    naming the peer."""
    import json

    from fedviews.federation._meta import loads

    assert loads('{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        loads("[" * 200_000 + "]" * 200_000)


def test_a_float_wider_than_64_bits_is_refused_by_sender_and_decoder() -> None:
    """A Z_k of np.longdouble was taken and turned every honest model into float128."""
    import json

    from fedviews.federation._message import prefix

    with pytest.raises(ProtocolError, match="has dtype float128; only bool, integer and float"):
        Message("k", "a", "b", arrays={"x": np.zeros(2, np.longdouble)})
    spec = {"name": "x", "dtype": "<f16", "shape": [2], "size": 32}
    head = {"kind": "k", "sender": "a", "receiver": "b", "round": 0, "meta": {}, "arrays": [spec]}
    wire = prefix(json.dumps(head).encode()) + bytes(32)
    with pytest.raises(ProtocolError, match="forbidden dtype float128"):
        Message.decode(wire)


@pytest.mark.parametrize(
    ("meta", "says"),
    [
        ({"n_test": -3, "accuracy": 0.5}, "'p' sent n_test = -3.0, expected a whole number >= 0"),
        ({"n_test": 2.5, "accuracy": 0.5}, "n_test = 2.5"),
        ({"n_test": 4, "accuracy": 7.5}, "'p' sent accuracy = 7.5, expected a share in"),
        ({"n_test": 4, "accuracy": -0.1}, "accuracy = -0.1"),
    ],
)
def test_a_reported_count_or_share_out_of_range_names_its_sender(meta, says) -> None:
    """V-FedMV's server recorded 'accuracy 7.5000 on -3 samples' as a run's result."""
    from fedviews.federation import reported_count, reported_share

    msg = Message("score:reply", "p", "coordinator", meta=meta)
    with pytest.raises(ProtocolError, match=says) as err:
        reported_count(msg, "n_test"), reported_share(msg, "accuracy")
    assert err.value.party == "p"
    ok = Message("score:reply", "p", "coordinator", meta={"n": 3, "k": 3, "a": 1.0})
    assert reported_count(ok, "k", at_most=reported_count(ok, "n")) == 3
    assert reported_share(ok, "a") == 1.0
    with pytest.raises(ProtocolError, match="at most 2"):
        reported_count(ok, "k", at_most=2)


class Squarer(Party):
    """Answers ``square`` with the square of what it got, blaming its largest input."""

    @handles("square")
    def on_square(self, msg: Message) -> Message:
        x = msg.arrays["x"]
        with np.errstate(over="ignore"):
            h = x * x
        return self.reply(
            msg, arrays={"h": h}, blame=largest_input(self.name, {msg.sender: {"x": x}})
        )


def test_a_numpy_overflow_names_the_largest_input_s_sender_in_one_process() -> None:
    """The in-process hand-over's check of numpy arrays ignored the sender's ``blame`` (the
    encoding sender's and the tensors' deferred checks read it): 1e200 squared named the
    honest squarer, which a gRPC run of the same code did not."""
    c, a = Asker("c"), Squarer("a")
    federate(
        [c, a],
        PrivacyPolicy.of("sq", {("coordinator", "party"): ["x"], ("party", "coordinator"): ["h"]}),
    )
    assert c.send("a", "square", {"x": np.full(3, 2.0)}).arrays["h"].tolist() == [4.0] * 3
    for _ in range(2):  # in full, then by lane
        with pytest.raises(ProtocolError, match="'c' sent 'x' with values so large") as err:
            c.send("a", "square", {"x": np.full(3, 1e200)})
        assert err.value.party == "c"
