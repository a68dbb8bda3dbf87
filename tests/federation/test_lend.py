"""Tensors lent in one process (``_lend``): handed over without a copy, read-only for their
receiver, a write into one refused naming the receiver that made it, never its lender; and
the split-learning algorithms send their activations and gradients lent."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedviews.errors import ProtocolError
from fedviews.federation import Message, Party, PrivacyPolicy, federate, handles, lend

torch = pytest.importorskip("torch")

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]
POLICY = PrivacyPolicy.of("pass", {("party", "party"): ["h", "g"]})


class Reader(Party):
    """Keeps what it receives; with ``write``, writes into it (in place) first; with
    ``lent``, replies with a tensor of its own, lent."""

    def __init__(self, name: str, *, write: bool = False, lent: bool = False) -> None:
        super().__init__(name)
        self.write, self.lent = write, lent
        self.got: list[Message] = []
        self.mine = torch.arange(6.0).reshape(2, 3)

    @handles("pass")
    def on_pass(self, msg: Message) -> Message:
        self.got.append(msg)
        if self.write:
            msg.arrays["h"].mul_(2.0)
        if self.lent:
            return self.reply(msg, arrays={"g": lend(self.mine)})
        return self.reply(msg, arrays={"g": msg.arrays["h"]})  # passed on


@pytest.fixture
def any_size(monkeypatch) -> None:
    """Small tensors lent are handed over as aliases too (not only from LEND_MIN_BYTES)."""
    import fedviews.federation._lend as lend_module

    monkeypatch.setattr(lend_module, "LEND_MIN_BYTES", 0)


def _federation(*parties: Party) -> Any:
    return federate([Party("a"), *parties], POLICY)


@pytest.mark.parametrize("device", DEVICES)
def test_a_lent_tensor_is_handed_over_without_a_copy_and_without_its_graph(
    device, any_size
) -> None:
    t = _federation(b := Reader("b"))
    w = torch.ones(4, 6, device=device, requires_grad=True)
    h = (w * 3.0)[:, 1:4]  # a view in the sender's graph: handed over as one
    reply = t.local["a"].send("b", "pass", arrays={"h": lend(h)})
    got = b.got[0].arrays["h"]
    assert got is not h and got.data_ptr() == h.data_ptr()
    assert got.stride() == h.stride() and got.shape == h.shape and got.device == h.device
    assert got.grad_fn is None and not got.requires_grad
    # what the receiver passes on is not lent by it: a copy
    assert reply.arrays["g"].data_ptr() != h.data_ptr()
    h.sum().backward()  # the sender's graph is its own and intact
    want = torch.zeros(4, 6, device=device)
    want[:, 1:4] = 3.0
    torch.testing.assert_close(w.grad, want)
    # the log and its byte counts are those of the same message not lent
    plain = _federation(Reader("b"))
    plain.local["a"].send("b", "pass", arrays={"h": h.detach().clone()})
    assert t.log.entries == plain.log.entries


def test_a_tensor_not_lent_or_lent_but_small_is_copied() -> None:
    from fedviews.federation._lend import LEND_MIN_BYTES

    t = _federation(b := Reader("b"))
    big, small = torch.ones(LEND_MIN_BYTES // 4), torch.ones(LEND_MIN_BYTES // 4 - 1)
    for h in (big, lend(small)):
        t.local["a"].send("b", "pass", arrays={"h": h})
    assert [m.arrays["h"].data_ptr() for m in b.got] != [big.data_ptr(), small.data_ptr()]
    assert all(m.arrays["h"].data_ptr() not in (big.data_ptr(), small.data_ptr()) for m in b.got)
    t.local["a"].send("b", "pass", arrays={"h": lend(big)})
    assert b.got[-1].arrays["h"].data_ptr() == big.data_ptr()


def test_a_receiver_writing_into_a_lent_tensor_is_named_before_its_lender_runs(any_size) -> None:
    """The write is refused when the reply comes back to the lender, naming the receiver."""
    t = _federation(Reader("b", write=True))
    with pytest.raises(
        ProtocolError, match=r"'b' wrote into 'h' of a 'pass' message, which 'a'"
    ) as e:
        t.local["a"].send("b", "pass", arrays={"h": lend(torch.ones(2, 3))})
    assert e.value.party == "b"


def test_of_two_receivers_of_views_of_one_lent_tensor_the_one_that_wrote_is_named(any_size) -> None:
    """Every alias has its own version counter: views of one gradient sent to two parties,
    and only the second writes into its own."""
    t = _federation(Reader("b"), Reader("c", write=True))
    g = torch.ones(2, 6)
    parts = torch.split(g, 3, dim=1)
    with pytest.raises(ProtocolError) as e:
        t.local["a"].scatter("pass", {"b": {"h": lend(parts[0])}, "c": {"h": lend(parts[1])}})
    assert e.value.party == "c" and "'c' wrote into 'h'" in str(e.value)


def test_a_write_into_what_a_party_lent_is_refused_before_it_gets_its_next_message(
    any_size,
) -> None:
    """The lender (``b``) lends its tensor in a reply; the receiver (``a``) writes into it
    after its request returned; ``b``'s next message is refused naming ``a``, and ``b`` never
    runs on it."""
    t = _federation(b := Reader("b", lent=True))
    a = t.local["a"]
    reply = a.send("b", "pass", arrays={"h": torch.ones(2, 3)})
    got = reply.arrays["g"]
    assert got.data_ptr() == b.mine.data_ptr()
    a.send("b", "pass", arrays={"h": torch.ones(2, 3)})  # read only: fine
    got.add_(1.0)
    with pytest.raises(ProtocolError, match=r"'a' wrote into 'g' of a 'pass:reply' message") as e:
        a.send("b", "pass", arrays={"h": torch.ones(2, 3)})
    assert e.value.party == "a" and len(b.got) == 2
    a.send("b", "pass", arrays={"h": torch.ones(2, 3)})  # the failed run's lends are forgotten
    assert len(b.got) == 3


def test_a_write_is_found_when_the_outermost_request_ends_if_its_lender_gets_no_message(
    any_size,
) -> None:
    t = _federation(Reader("b", lent=True), c := Reader("c"))
    a = t.local["a"]
    got = a.send("b", "pass", arrays={"h": torch.ones(2, 3)}).arrays["g"]
    got.add_(1.0)
    with pytest.raises(ProtocolError, match=r"'a' wrote into 'g'") as e:
        a.send("c", "pass", arrays={"h": torch.ones(2, 3)})
    assert e.value.party == "a" and len(c.got) == 1  # (its reply came back first)
    a.send("c", "pass", arrays={"h": torch.ones(2, 3)})


def test_what_no_receiver_holds_any_more_is_forgotten(any_size) -> None:
    t = _federation(Reader("b", lent=True))
    for _ in range(5):
        t.local["a"].send("b", "pass", arrays={"h": torch.ones(2, 3)})
    assert sum(len(r) for r in t.lends._records().values()) <= 1


# --------------------------------------------------------------------------- the algorithms


def _copies(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The shapes of the tensors the in-process transport copies from now on."""
    import fedviews.federation._lend as lend_module

    shapes: list[tuple[int, ...]] = []
    copy = lend_module.receiver_copy

    def counted(x: Any) -> Any:
        shapes.append(tuple(x.shape))
        return copy(x)

    monkeypatch.setattr(lend_module, "receiver_copy", counted)
    return shapes


def _images(n: int = 96) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, (n, 28, 28)).astype(np.uint8), np.arange(n) % 10


def test_multivfl_hands_over_its_activations_and_gradients_without_a_copy(monkeypatch) -> None:
    from fedviews.deep.multivfl import MultiVFL

    X, y = _images()
    copied = _copies(monkeypatch)
    est = MultiVFL(n_data_owners=2, n_label_owners=1, rounds=1, batch_size=32)
    est.fit(X, y, label_owner_ids=[np.arange(len(y))])
    assert {"activations", "activation_grad"} <= est.transport_.log.arrays_sent()
    assert all(s[0] != 32 for s in copied), copied  # no batch of activations or gradients


def test_apfed_and_a_split_nn_of_large_outputs_hand_over_their_batches_without_a_copy(
    monkeypatch,
) -> None:
    """(The default split NN's outputs are logits, copied: smaller than LEND_MIN_BYTES.)"""
    from fedviews.deep.apfed import APFed
    from fedviews.deep.splitnn import SplitNN

    X, y = _images()
    copied = _copies(monkeypatch)
    APFed(m=2, i=1, epochs=1, batch_size=32).fit(X, y)
    SplitNN(n_parties=2, epochs=1, batch_size=32, bottom=_wide, top=_head).fit(X, y)
    assert all(s[0] != 32 for s in copied), copied


def _wide(shape: tuple[int, ...], n_classes: int) -> Any:
    """A bottom of 1024 outputs (128 KiB for a batch of 32)."""
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(np.prod(shape)), 1024))


def _head(shape: tuple[int, ...], n_classes: int) -> Any:
    return torch.nn.Linear(shape[0], n_classes)
