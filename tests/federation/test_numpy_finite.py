"""A NaN or an infinity in a numpy array is refused on arrival by every transport, naming its
sender, also where the receiver's handler reads ``msg.arrays`` as they came (it used to be
checked only by ``Message.array``: a handler that read ``msg.arrays`` took NaN in and a
deployment ended "ok" with NaN weights)."""

from __future__ import annotations

import numpy as np
import pytest

from fedviews.errors import ProtocolError
from fedviews.federation import Coordinator, Message, Party, PrivacyPolicy, federate, handles

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
