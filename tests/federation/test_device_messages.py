"""Torch tensors as message arrays: handed over in one process on their device (detached
copies, checked there), encoded as numpy arrays on a wire, byte counts equal either way."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedviews.errors import PartyUnavailable, ProtocolError, RemoteError
from fedviews.federation import Backward, Message, Party, PrivacyPolicy, federate, handles
from fedviews.federation._handover import FiniteChecks, hand_over

torch = pytest.importorskip("torch")

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]
POLICY = PrivacyPolicy.of("pass", {("party", "party"): ["h", "g", "n"]})


class Echo(Party):
    """Writes into what it receives (in place), keeps it, and replies with it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.got: list[Message] = []

    @handles("pass")
    def on_pass(self, msg: Message) -> Message:
        self.got.append(msg)
        h = msg.arrays["h"]
        h.add_(1.0) if isinstance(h, torch.Tensor) else np.add(h, 1.0, out=h)
        return self.reply(msg, arrays={"g": h})


def _pair() -> tuple[Party, Echo, object]:
    a, b = Party("a"), Echo("b")
    return a, b, federate([a, b], POLICY)


@pytest.mark.parametrize("device", DEVICES)
def test_a_receiver_writing_into_a_tensor_changes_nothing_of_the_senders(device) -> None:
    """The receiver gets a copy on the sender's device, outside the sender's autograd graph:
    writing into it changes neither the sender's tensor nor its gradient."""
    a, b, _ = _pair()
    w = torch.ones(3, 4, device=device, requires_grad=True)
    h = w * 2.0  # part of the sender's graph
    reply = a.send("b", "pass", arrays={"h": h})
    got = b.got[0].arrays["h"]
    assert isinstance(got, torch.Tensor) and got.device == h.device
    assert got.grad_fn is None and not got.requires_grad
    assert got.data_ptr() != h.data_ptr()
    torch.testing.assert_close(h.detach(), torch.full((3, 4), 2.0, device=device))
    # the reply is a copy too: the receiver's tensor is not the sender's reply
    back = reply.arrays["g"]
    assert isinstance(back, torch.Tensor) and back.data_ptr() != got.data_ptr()
    torch.testing.assert_close(back, torch.full((3, 4), 3.0, device=device))
    h.sum().backward()  # the sender's graph is intact and its own
    torch.testing.assert_close(w.grad, torch.full((3, 4), 2.0, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_a_nan_tensor_is_refused_naming_its_sender(device) -> None:
    """Checked without a host synchronisation per message: when the request returns, the
    first tensor that is not finite is refused as its sender's (the receiver got it)."""
    a, b, t = _pair()
    h = torch.ones(2, 3, device=device)
    h[1, 2] = float("nan")
    with pytest.raises(ProtocolError, match="'a' sent 'n' with NaN or infinite") as err:
        a.send("b", "pass", arrays={"h": torch.ones(2, device=device), "n": h})
    assert err.value.party == "a" and len(b.got) == 1
    h[1, 2] = float("inf")
    with pytest.raises(ProtocolError, match="'a' sent 'n' with NaN or infinite") as err:
        a.send("b", "pass", arrays={"n": h})  # b fails on it (no 'h'): a is named, not b
    assert isinstance(err.value.__cause__, RemoteError) and len(b.got) == 2
    # finite values whose sum would overflow their dtype pass
    a.send("b", "pass", arrays={"h": torch.full((4,), 3e38, device=device)})
    a.send("b", "pass", arrays={"h": torch.full((4,), 1e308, device=device, dtype=torch.float64)})
    a.send("b", "pass", arrays={"h": torch.zeros(0, 3, device=device, dtype=torch.float16)})
    assert len(b.got) == 5 and t.log.n_messages == 2 + 1 + 2 + 2 + 2


class Top(Party):
    """A split model's top on one device: per batch, the bottoms' outputs, then their
    gradients back (staged); ``loss`` checks its own loss (a victim of a NaN it got)."""

    def __init__(self, bottoms: list[str], batches: int) -> None:
        super().__init__("top")
        self.bottoms, self.batches, self.losses = bottoms, batches, []

    @handles("train")
    def train(self, msg: Message) -> Message:
        for _ in range(self.batches):
            got = self.broadcast(self.bottoms, "fwd")
            hs = [got[n].tensor("h", (4, 2)).requires_grad_(True) for n in self.bottoms]
            loss = sum((h**2).sum() for h in hs)
            loss.backward()
            self.losses.append(loss.detach())
            self.scatter("bwd", {n: {"g": h.grad} for n, h in zip(self.bottoms, hs, strict=True)})
        if msg.meta.get("strict") and not torch.isfinite(torch.stack(self.losses)).all():
            raise ProtocolError("'top' computed a loss that is not finite", party="top")
        return self.reply(msg, meta={"loss": float(sum(self.losses))})


def _split(batches: int, fail: str = "", device: str = "cpu") -> tuple[Party, Top, list[Bottom]]:
    policy = PrivacyPolicy.of("split", {("party", "party"): ["h", "g"]})
    bottoms = [Bottom(f"b{i}", device=device) for i in range(3)]
    top, driver = Top([b.name for b in bottoms], batches), Party("driver")
    federate([driver, top, *bottoms], policy)
    if fail:
        with torch.no_grad():
            next(b for b in bottoms if b.name == fail).net.bias.fill_(float("nan"))
    return driver, top, bottoms


class _HostReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the reads of a tensor's value by the host (``item``, ``float``, ``bool``: one
    synchronisation each on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += func is torch.ops.aten._local_scalar_dense.default
        return func(*args, **(kwargs or {}))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_run_reads_the_finiteness_of_its_device_tensors_once() -> None:
    """Ten batches of three bottoms on a GPU (60 tensors handed over) and one host read of
    their finiteness, when the driver's request returns (it used to be one per message)."""
    driver, top, bottoms = _split(batches=10, device="cuda")
    with _HostReads() as reads:
        reply = driver.send("top", "train")
    assert reads.n == 1 + 1  # the settled checks, and the top's loss (its float() in train)
    assert reply.number("loss") > 0


def test_a_nan_is_blamed_on_its_sender_not_on_the_party_it_made_fail() -> None:
    """A bottom's NaN output reaches the top before it is checked; the top fails on its
    NaN loss (naming itself), and the run fails naming the bottom, returning nothing."""
    driver, top, _ = _split(batches=3, fail="b1")
    with pytest.raises(ProtocolError, match="'b1' sent 'h' with NaN or infinite") as err:
        driver.send("top", "train", meta={"strict": True})
    assert err.value.party == "b1" and "'top' computed" in str(err.value.__cause__)
    driver, top, _ = _split(batches=3, fail="b1")  # the driver never gets the NaN loss
    with pytest.raises(ProtocolError, match="'b1' sent 'h' with NaN") as err:
        driver.send("top", "train")
    assert err.value.party == "b1" and len(top.losses) == 3


def test_the_checks_settle_every_limit_tensors() -> None:
    """A long request settles its checks every ``limit`` tensors: a NaN stops it within."""
    driver, top, _ = _split(batches=1000, fail="b0")
    driver.transport.checks.limit = 12
    with pytest.raises(ProtocolError, match="'b0' sent 'h' with NaN"):
        driver.send("top", "train")
    assert len(top.losses) <= 2


class Gate(Party):
    """Replies only once ``go`` is set (``inside``: its handler got a message)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.inside, self.go = threading.Event(), threading.Event()

    @handles("pass")
    def on_pass(self, msg: Message) -> Message:
        self.inside.set()
        assert self.go.wait(60)
        return self.reply(msg)


@pytest.mark.parametrize("device", DEVICES)
def test_threads_sharing_a_transport_settle_their_own_checks(device) -> None:
    """One queue of checks per transport: a thread whose request ended while another's NaN
    was queued was refused for it (naming the other thread's sender), and the NaN's own
    request then returned as if it were finite. Each thread settles its own."""
    a, gate, c, d = Party("a"), Gate("gate"), Party("c"), Echo("d")
    federate([a, gate, c, d], POLICY)
    nan = torch.tensor([1.0, float("nan")], device=device)
    failed: list[BaseException] = []

    def send_nan() -> None:
        try:
            a.send("gate", "pass", arrays={"n": nan})
        except BaseException as exc:  # (the test reads it in its own thread)
            failed.append(exc)

    thread = threading.Thread(target=send_nan)
    thread.start()
    try:
        assert gate.inside.wait(60)  # the NaN is handed over, its request still under way
        reply = c.send("d", "pass", arrays={"h": torch.ones(2, device=device)})
    finally:
        gate.go.set()
        thread.join(60)
    torch.testing.assert_close(reply.tensor("g", (2,)), torch.full((2,), 2.0, device=device))
    assert len(failed) == 1 and isinstance(failed[0], ProtocolError), failed
    assert failed[0].party == "a" and "'a' sent 'n' with NaN" in str(failed[0])


class Swallow(Party):
    """Asks ``poison`` on every ``relay`` and goes on whatever it answers."""

    def __init__(self) -> None:
        super().__init__("mid")
        self.swallowed: list[ProtocolError] = []

    @handles("relay")
    def relay(self, msg: Message) -> Message:
        try:
            self.send("poison", "pass", arrays={"h": torch.ones(2)})
        except ProtocolError as exc:
            self.swallowed.append(exc)
        return self.reply(msg)


class Poison(Party):
    """Replies with a NaN while ``nan``."""

    nan = True

    @handles("pass")
    def on_pass(self, msg: Message) -> Message:
        return self.reply(msg, arrays={"g": torch.tensor([1.0, float("nan") if self.nan else 2])})


def test_a_handler_that_swallows_a_refusal_does_not_make_the_nan_be_forgotten() -> None:
    """A refusal raised inside a handler's request (the checks settled there: every
    ``limit`` tensors, or on a failure) was forgotten once raised: a handler that caught it
    let the run go on with the NaN. It is raised again by the outermost request."""
    driver, mid, poison = Party("driver"), Swallow(), Poison("poison")
    policy = PrivacyPolicy.of("relay", {("party", "party"): ["h", "g"]})
    transport = federate([driver, mid, poison], policy)
    transport.checks.limit = 1  # (settled inside mid's request to poison)
    with pytest.raises(ProtocolError, match="'poison' sent 'g' with NaN") as err:
        driver.send("mid", "relay")
    assert err.value.party == "poison" and mid.swallowed == [err.value]
    poison.nan = False  # raised by the outermost request: the transport goes on after it
    assert driver.send("mid", "relay").kind == "relay:reply" and len(mid.swallowed) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_a_receiver_checks_a_tensors_shape_and_dtype(device) -> None:
    """Message.tensor checks what Message.array checks, on the device, and moves it."""
    a, b, _ = _pair()
    a.send("b", "pass", arrays={"h": torch.zeros(2, 3, device=device), "n": torch.arange(2)})
    msg = b.got[0]
    x = msg.tensor("h", (2, None), np.float32, "cpu")
    assert x.device.type == "cpu" and x.dtype == torch.float32
    with pytest.raises(ProtocolError, match="'a' sent 'h' of shape \\(2, 3\\) in 'pass', "):
        msg.tensor("h", (3, 3))
    with pytest.raises(ProtocolError, match="'a' sent 'n' as int64 in 'pass', expected floating"):
        msg.tensor("n", (2,), np.float32)
    with pytest.raises(ProtocolError, match="'a' sent 'pass' without the array 'g'"):
        msg.tensor("g", (2,))
    # a tensor that did not come through the transport is checked on the spot
    raw = Message("pass", "a", "b", arrays={"h": torch.tensor([1.0, float("nan")])})
    with pytest.raises(ProtocolError, match="'a' sent 'h' with NaN"):
        raw.tensor("h", (2,))
    with pytest.raises(ProtocolError, match="'a' sent 'h' with NaN"):
        Message("pass", "a", "b", arrays={"h": torch.tensor([1e39], dtype=torch.float64)}).tensor(
            "h", (1,), np.float32
        )  # beyond float32: infinite once cast
    with pytest.raises(ProtocolError, match="bfloat16 cannot be sent"):
        Message("pass", arrays={"h": torch.zeros(2, dtype=torch.bfloat16)})
    with pytest.raises(ProtocolError, match="only dense ones"):
        Message("pass", arrays={"h": torch.eye(2).to_sparse()})


def test_a_tensor_already_on_the_device_asked_for_is_not_moved(monkeypatch) -> None:
    """Message.tensor calls ``.to`` only for a tensor elsewhere than ``device``."""
    moved: list[Any] = []
    to = torch.Tensor.to

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        moved.append(args)
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", spy)
    h = torch.zeros(2, 3)
    msg = Message("pass", "a", "b", arrays={"h": h})
    for device in ("cpu", torch.device("cpu")):
        assert msg.tensor("h", (2, 3), np.float32, device) is h
    assert moved == []
    assert msg.tensor("h", (2, 3), np.float32, "meta").device.type == "meta"
    assert moved == [("meta",)]


dtypes = st.sampled_from(["<f8", "<f4", "<f2", "<i8", "<i4", "|u1", "|b1", ">f8", "<i2"])
arrays = dtypes.flatmap(
    lambda dt: hnp.arrays(np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
)


@settings(max_examples=100, deadline=None)
@given(
    arrs=st.dictionaries(st.text(min_size=1, max_size=6), arrays, max_size=3),
    as_tensor=st.lists(st.booleans(), min_size=3, max_size=3),
    meta=st.dictionaries(
        st.text(max_size=6),
        st.one_of(
            st.none(), st.integers(-(2**63), 2**64 - 1), st.text(), st.booleans(), st.floats()
        ),
        max_size=3,
    ),
    rnd=st.sampled_from([0, 3, 12345, np.int64(7)]),
    subclass=st.booleans(),
)
def test_handing_over_equals_decoding_the_encoding(arrs, as_tensor, meta, rnd, subclass) -> None:
    """What the in-process transport delivers and counts is what a wire delivers and counts:
    the same header, arrays of the same values, shapes and dtypes, as many bytes (a header of
    plain values read as it is, any other, e.g. of a numpy round or a float64 meta value,
    through its JSON)."""
    if subclass:
        meta = {k: np.float64(v) if isinstance(v, float) else v for k, v in meta.items()}
    finite = {
        k: np.asarray(np.nan_to_num(a)) if a.dtype.kind == "f" else a for k, a in arrs.items()
    }
    sent = {
        k: torch.from_numpy(a.astype(a.dtype.newbyteorder("="))) if t else a
        for (k, a), t in zip(finite.items(), as_tensor, strict=False)
    }
    msg = Message("k", "a", "b", round=rnd, arrays=sent, meta=meta)
    got, head, nbytes = hand_over(msg, FiniteChecks())
    wire = Message.decode(msg.encode())
    assert nbytes == len(msg.encode())
    assert got.header() == head == wire.header() and repr(got.meta) == repr(wire.meta)
    for k, a in wire.arrays.items():
        b = got.arrays[k]
        if isinstance(b, torch.Tensor):
            assert b.is_contiguous() and not b.requires_grad
            b = b.numpy()
        assert b.shape == a.shape and b.dtype == a.dtype
        np.testing.assert_array_equal(b, a)


def test_a_wire_encodes_a_tensor_as_its_numpy_array() -> None:
    """gRPC and Flower encode a message (Message.encode_parts, encode): a tensor, even one
    of an autograd graph, is converted once, as the numpy array of its values."""
    w = torch.arange(6.0, dtype=torch.float64, requires_grad=True)
    msg = Message("k", "a", "b", arrays={"h": (w * 2).reshape(2, 3).t()})
    same = Message("k", "a", "b", arrays={"h": (np.arange(6.0) * 2).reshape(2, 3).T})
    assert msg.encode() == same.encode()
    assert b"".join(bytes(p) for p in msg.encode_parts()) == same.encode()
    assert msg.nbytes == same.nbytes == 48


class Bottom(Party):
    """A party's own linear layer: replies to ``fwd`` with its output ``h``; the gradient
    ``g`` of ``bwd`` goes back through it (staged, when its transport stages it)."""

    def __init__(
        self, name: str, fail: bool = False, device: str = "cpu", together: Any = None
    ) -> None:
        super().__init__(name)
        self.net, self.device = torch.nn.Linear(3, 2, device=device), device
        self.fail, self.out, self.staged = fail, torch.zeros(0), None
        self.together, self.steps = together, 0

    def step(self) -> None:
        self.steps += 1

    @handles("fwd")
    def on_fwd(self, msg: Message) -> Message:
        self.out = self.net(torch.ones(4, 3, device=self.device))
        return self.reply(msg, arrays={"h": self.out})

    def stage(self, msg: Message) -> Backward | None:
        if msg.kind != "bwd":
            return None
        if self.fail:
            raise RuntimeError("out of memory")
        self.staged = msg
        return Backward((self.out,), (msg.tensor("g", (4, 2)),), self.step, self.together)

    @handles("bwd")
    def on_bwd(self, msg: Message) -> None:
        if self.staged is not msg:
            self.out.backward(msg.tensor("g", (4, 2)))


def test_staged_backward_passes_run_as_one_and_a_failing_stage_is_named() -> None:
    """The receivers of one scatter stage their backward passes: one autograd call gives each
    its own gradient; a party whose staging fails is named, before any handler runs."""
    policy = PrivacyPolicy.of("bwd", {("party", "party"): ["h", "g"]})
    a, b, c = Party("a"), Bottom("b"), Bottom("c")
    t = federate([a, b, c], policy)
    a.broadcast(["b", "c"], "fwd")
    g = {"b": {"g": torch.ones(4, 2)}, "c": {"g": torch.full((4, 2), 2.0)}}
    a.scatter("bwd", g)
    assert b.staged is not None and c.staged is not None
    for party, scale in ((b, 1.0), (c, 2.0)):
        torch.testing.assert_close(party.net.bias.grad, torch.full((2,), 4 * scale))
    a.broadcast(["b", "c"], "fwd")
    c.fail, n = True, t.log.n_messages
    with pytest.raises(RemoteError, match="'c' reported RuntimeError: "):
        a.scatter("bwd", g)
    assert t.log.n_messages == n and b.net.bias.grad.eq(4.0).all()  # nothing delivered


def test_staged_thens_of_one_together_run_as_one_call_and_its_failure_names_them_all() -> None:
    """The ``then`` of staged passes that carry the same ``together`` run as one call of it
    (once per delivery); a pass without one, or alone with its ``together``, runs its own
    ``then``; a failing joint call names every party in it."""
    calls: list[list[Any]] = []

    def together(thens: Any) -> None:
        calls.append(list(thens))
        for then in thens:
            then()

    def broken(thens: Any) -> None:
        raise RuntimeError("no memory")

    policy = PrivacyPolicy.of("bwd", {("party", "party"): ["h", "g"]})
    a, b, c = Party("a"), Bottom("b", together=together), Bottom("c", together=together)
    d, e = Bottom("d"), Bottom("e", together=broken)
    t = federate([a, b, c, d, e], policy)
    a.broadcast(["b", "c", "d", "e"], "fwd")
    a.scatter("bwd", {p: {"g": torch.ones(4, 2)} for p in "bcde"})
    assert calls == [[b.step, c.step]]
    assert (b.steps, c.steps, d.steps, e.steps) == (1, 1, 1, 1)  # e alone: its own then
    assert e.staged is not None and e.net.bias.grad.eq(4.0).all()
    c.together = b.together = broken
    a.broadcast(["b", "c"], "fwd")
    with pytest.raises(ProtocolError, match=r"optimiser step that \['b', 'c'\] staged together"):
        a.scatter("bwd", {p: {"g": torch.ones(4, 2)} for p in "bc"})
    assert t.log.handler_seconds["b"] > 0


@pytest.mark.parametrize("device", DEVICES)
def test_a_scatter_handed_over_in_one_pass_refuses_its_first_bad_array_naming_its_sender(
    device,
) -> None:
    """The requests of a staged scatter are handed over in one pass and their tensors'
    finiteness queued in one call: the first one that is not finite, in the scatter's order,
    is refused naming its sender and array (finite values whose sum overflows pass); a
    message refused on the way (a gradient of the wrong shape, an unknown receiver) is named,
    nothing steps, and the tensors handed over before it are still checked."""
    a, b, c, d = Party("a"), *(Bottom(n, device=device) for n in "bcd")
    t = federate([a, b, c, d], PrivacyPolicy.of("bwd", {("party", "party"): ["h", "g"]}))
    ones, big = torch.ones(4, 2, device=device), torch.full((4, 2), 3e38, device=device)
    nan, inf = ones.clone(), ones.clone()
    nan[2, 1], inf[0, 0] = float("nan"), float("inf")
    a.broadcast(["b", "c", "d"], "fwd")
    bad = {"b": {"g": big}, "c": {"g": ones, "h": nan}, "d": {"g": inf}}
    with pytest.raises(ProtocolError, match="'a' sent 'h' with NaN or infinite values in 'bwd'"):
        a.scatter("bwd", bad)
    assert (b.steps, c.steps, d.steps) == (1, 1, 1)  # (settled when the scatter returned)
    a.broadcast(["b", "c", "d"], "fwd")
    n = t.log.n_messages
    with pytest.raises(ProtocolError, match=r"'a' sent 'g' of shape \(3, 2\)") as err:
        a.scatter("bwd", {"b": {"g": big}, "c": {"g": ones}, "d": {"g": ones[1:]}})
    assert err.value.party == "a" and t.log.n_messages == n
    assert (b.steps, c.steps, d.steps) == (1, 1, 1)  # refused while staging: no pass ran
    with pytest.raises(ProtocolError, match="'a' sent 'h' with NaN") as err:
        a.scatter("bwd", {"b": {"g": ones}, "c": {"g": ones, "h": nan}, "zz": {"g": ones}})
    assert isinstance(err.value.__cause__, PartyUnavailable) and t.log.n_messages == n
