import numpy as np
import pytest

from fedviews.errors import ConfigError, PartyUnavailable, PrivacyError, ProtocolError, RemoteError
from fedviews.federation import (
    Coordinator,
    LogEntry,
    Message,
    MessageLog,
    Party,
    PrivacyPolicy,
    federate,
    handles,
)
from fedviews.federation._log import MAX_PAIR_META_KEYS

POLICY = PrivacyPolicy.of(
    "sum", {("party", "coordinator"): ["partial"], ("coordinator", "party"): ["x"]}
)


class Holder(Party):
    def __init__(self, name, secret):
        super().__init__(name)
        self.secret = secret

    @handles("partial")
    def on_partial(self, msg):
        return self.reply(msg, arrays={"partial": self.secret.sum(axis=0) * msg.arrays["x"]})

    @handles("leak")
    def on_leak(self, msg):
        return self.reply(msg, arrays={"secret": self.secret})

    @handles("crash")
    def on_crash(self, msg):
        raise ZeroDivisionError("boom")


class Summer(Coordinator):
    def run(self):
        replies = self.broadcast(
            ["a", "b"], "partial", arrays={"x": np.array([2.0])}, meta={"scale": 2.5}, round=1
        )
        return sum(r.arrays["partial"] for r in replies.values())


def test_protocol_runs_and_is_logged():
    a, b = Holder("a", np.ones((3, 2))), Holder("b", np.full((2, 2), 2.0))
    server = Summer()
    t = federate([server, a, b], POLICY)
    np.testing.assert_array_equal(server.run(), [14.0, 14.0])
    log = t.log
    assert log.n_messages == 4 and log.rounds == 1
    assert log.arrays_sent(sender="a") == {"partial"}
    assert log.arrays_sent(receiver="a") == {"x"}
    assert log.crossings() == {
        "a -> coordinator": ["partial"],
        "b -> coordinator": ["partial"],
        "coordinator -> a": ["x"],
        "coordinator -> b": ["x"],
    }
    s = log.summary()
    assert (
        s["per_party"]["a"]["bytes_sent"] > 16
        and s["per_party"]["coordinator"]["bytes_received"] > 32
    )
    assert [e.kind for e in log.entries] == ["partial", "partial:reply"] * 2
    # metadata keys are logged (not their values), per pair
    assert s["meta_keys"] == {"coordinator -> a": ["scale"], "coordinator -> b": ["scale"]}
    assert log.entries[0].meta == ("scale",)


def test_received_arrays_are_copies():
    a = Holder("a", np.ones((3, 2)))
    server = Summer()
    federate([server, a, Holder("b", np.ones((1, 2)))], POLICY)
    x = np.array([1.0])
    reply = server.send("a", "partial", arrays={"x": x})
    reply.arrays["partial"][:] = -1
    assert a.secret.min() == 1.0


def test_privacy_violation_raises_before_sending():
    a = Holder("a", np.ones((3, 2)))
    server = Summer()
    t = federate([server, a], POLICY)
    with pytest.raises(
        PrivacyError, match=r"forbids 'a' \(party\) from sending \['secret'\]"
    ) as err:
        server.send("a", "leak")
    assert err.value.party == "a"  # its sender, as the gRPC hub names it (it was None here)
    assert "secret" not in t.log.arrays_sent()
    with pytest.raises(PrivacyError, match="coordinator") as err:
        server.send("a", "partial", arrays={"raw_view": np.ones(3)})
    assert err.value.party == "coordinator"


def test_a_policy_remembers_only_passed_checks_and_a_bounded_number(monkeypatch):
    """A passed check is remembered (the same message is not looked up again); a refused one
    is refused every time, and a peer's made-up kinds (a policy without kinds lets them
    through) do not grow what the policy remembers beyond ``MAX_PASSED``."""
    from fedviews.federation import _policy

    monkeypatch.setattr(_policy, "MAX_PASSED", 5)
    policy = PrivacyPolicy.of("sum", {("party", "coordinator"): ["partial"]})
    for _ in range(2):
        policy.check("a", "party", "s", "coordinator", ("partial",), "partial")
        with pytest.raises(PrivacyError, match=r"forbids 'a' \(party\) from sending \['x'\]"):
            policy.check("a", "party", "s", "coordinator", ("partial", "x"), "partial")
        with pytest.raises(PrivacyError, match="from sending a 'psi:x' message"):
            policy.check("a", "party", "s", "coordinator", (), "psi:x")
    assert policy._passed == {("party", "coordinator", "partial", ("partial",))}
    for i in range(20):
        policy.check("a", "party", "s", "coordinator", (), f"made-up-{i}")
    assert len(policy._passed) == 5


def test_dead_or_unknown_party_and_unknown_kind():
    a = Holder("a", np.ones((3, 2)))
    server = Summer()
    federate([server, a], POLICY)
    with pytest.raises(RemoteError, match=r"'a' reported \w+: .*boom.* \(handling 'crash'") as err:
        server.send("a", "crash")  # as a deployment says it (it read "unavailable")
    assert err.value.party == "a"
    with pytest.raises(PartyUnavailable, match="'zed'"):
        server.send("zed", "partial")
    with pytest.raises(ProtocolError, match="no handler for message kind 'nope'"):
        server.send("a", "nope")


def test_duplicate_party_names():
    with pytest.raises(ProtocolError, match="two parties"):
        federate([Holder("a", np.ones(1)), Holder("a", np.ones(1))], POLICY)


def test_a_reply_must_be_the_reply_to_its_request():
    """A party that answers one kind with a message of another kind (it would be read, logged
    and recorded as what it is not) or addresses it elsewhere is refused, named."""

    class Liar(Holder):
        @handles("partial")
        def on_partial(self, msg):
            good = super().on_partial(msg)
            return self._message(msg.sender, "leak:reply", good.arrays, None, msg.round)

    server = Summer()
    federate([server, Liar("a", np.ones((3, 2))), Holder("b", np.ones((1, 2)))], POLICY)
    with pytest.raises(ProtocolError, match="'a' answered 'partial' with a 'leak:reply' message"):
        server.send("a", "partial", arrays={"x": np.array([1.0])})
    np.testing.assert_array_equal(
        server.send("b", "partial", arrays={"x": np.ones(1)}).arrays["partial"], [1.0, 1.0]
    )


def test_threads_sharing_a_transport_lose_no_handler_time(monkeypatch):
    """Each handler's time was added to the log by a read, a clock call and a write: another
    thread's write in between (the clock here lets it run: a thread switch) was lost. With a
    clock that says one second per handler, the log now holds one per request."""
    import threading
    import time
    import types

    from fedviews.federation import _transport

    ticks = threading.local()

    def perf_counter() -> float:
        time.sleep(0)  # (lets the other thread run, as a switch at this call would)
        ticks.t = getattr(ticks, "t", 0.0) + 1.0  # each call one second on: a handler one
        return ticks.t

    monkeypatch.setattr(_transport, "time", types.SimpleNamespace(perf_counter=perf_counter))
    c, p = Summer(), Holder("p", np.ones((2, 3)))
    transport = federate([c, p], POLICY)
    n = 1000

    def requests() -> None:
        for _ in range(n):
            c.send("p", "partial", arrays={"x": np.ones(3)})

    threads = [threading.Thread(target=requests) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert transport.log.handler_seconds["p"] == 2 * n


def test_one_routes_messages_of_a_round_share_a_header_and_a_log_entry_counted_each_time():
    """In one process the hand-over compiles what the messages of one kind, parties and array
    specs share: those of one round and meta keys get one header, those of one size too one
    log entry; the log still counts and keeps every message, their bytes those of their
    encodings, and a new round, meta key or size gets a header or an entry of its own."""
    a = Holder("a", np.ones((3, 2)))
    server = Summer()
    t = federate([server, a], POLICY)
    sent = []
    for rnd, meta in [(1, {"b": 1}), (1, {"b": 2}), (1, {"b": 10}), (2, {"b": 3}), (2, {"c": 3})]:
        msg = Message("partial", "coordinator", "a", rnd, {"x": np.array([2.0])}, meta)
        server.send("a", "partial", msg.arrays, meta, rnd)
        sent.append(msg)
    requests = t.log.entries[::2]
    assert [e.nbytes for e in requests] == [len(m.encode()) for m in sent]
    assert requests[0] is requests[1]  # (one round, meta keys and size)
    assert len({id(e) for e in requests}) == 4 and [e.round for e in requests] == [1, 1, 1, 2, 2]
    assert [e.meta for e in requests] == [("b",)] * 4 + [("c",)]
    s = t.log.summary()
    assert s["messages"] == 10 and len(t.log.entries) == 10
    assert s["per_party"]["coordinator"]["bytes_sent"] == sum(len(m.encode()) for m in sent)
    assert s["meta_keys"] == {"coordinator -> a": ["b", "c"]}


def test_a_log_entry_recorded_again_counts_again_and_so_do_its_dropped_meta_keys():
    """The log takes in an entry's names once (one object for the messages of one header and
    size), but counts every message it records, and the meta keys its budget left out every
    time."""
    many = tuple(f"m{i}" for i in range(MAX_PAIR_META_KEYS + 5))
    log = MessageLog()
    entry = LogEntry("b", "c", 1, "x", ("h",), ((2,),), 10, meta=many)
    for _ in range(3):
        log.record(entry)
    s = log.summary()
    assert s["messages"] == 3 and s["per_party"]["b"]["bytes_sent"] == 30
    assert log.entries == [entry] * 3 and s["exchanges"] == [["b", "c", "x", ["h"]]]
    assert s["dropped_meta_keys"] == {"b -> c": 15}


@pytest.mark.parametrize("name", ["", " ", "x -> y", 3])
def test_a_party_name_that_the_log_cannot_tell_apart_is_refused(name):
    """ "x -> y" made crossings 'x -> y -> coordinator' (and the policy's `unused` a bare
    KeyError); an empty name, or one that is no string, named nobody."""
    with pytest.raises(ConfigError, match="a party's name is a non-empty string without '->'"):
        Holder(name, np.ones((3, 2)))


@pytest.mark.parametrize("kind", [123, "", "colsum:reply"])
def test_handles_takes_a_request_kind(kind):
    with pytest.raises(ConfigError, match="@handles takes a message kind"):
        handles(kind)
