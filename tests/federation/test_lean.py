"""The in-process transport's lean path (``_lean``): a message's checks once per signature,
every other message of a signature handed over without them; the log counted lazily."""

import threading

import numpy as np
import pytest

from fedviews.errors import PrivacyError, ProtocolError
from fedviews.federation import (
    Coordinator,
    LogEntry,
    MessageLog,
    Party,
    PrivacyPolicy,
    federate,
    handles,
)
from fedviews.federation._log import FOLD_EVERY

torch = pytest.importorskip("torch")

POLICY = PrivacyPolicy.of(
    "lean", {("party", "coordinator"): ["h"], ("coordinator", "party"): ["x", "y"]}
)


class Doubler(Party):
    @handles("double")
    def on_double(self, msg):
        return self.reply(msg, arrays={"h": 2 * msg.arrays["x"]})


class Asker(Coordinator):
    def run(self):
        raise NotImplementedError


@pytest.fixture
def checks(monkeypatch):
    """Every policy check made, as ``(sender, receiver, kind)``."""
    made = []
    check = PrivacyPolicy.check

    def spy(self, sender, sender_role, receiver, receiver_role, names, kind=None):
        made.append((sender, receiver, kind))
        return check(self, sender, sender_role, receiver, receiver_role, names, kind)

    monkeypatch.setattr(PrivacyPolicy, "check", spy)
    return made


def _fed():
    c, a, b = Asker("c"), Doubler("a"), Doubler("b")
    return c, federate([c, a, b], POLICY)


def test_a_signature_is_checked_once_and_every_other_signature_in_full(checks):
    c, t = _fed()
    x = torch.ones(3, 2)
    for rnd in range(4):  # one signature: checked once (sender, receiver; the reply's receiver)
        got = c.send("a", "double", {"x": x + rnd}, round=rnd)
        torch.testing.assert_close(got.arrays["h"], 2 * (x + rnd), rtol=0, atol=0)
    assert checks == [("c", "a", "double"), ("c", "a", "double"), ("a", "c", "double:reply")]
    checks.clear()
    c.send("a", "double", {"x": torch.ones(4, 2)})  # another shape
    c.send("a", "double", {"x": torch.ones(3, 2, dtype=torch.float64)})  # another dtype
    c.send("b", "double", {"x": x})  # another receiver
    c.send("a", "double", {"x": x}, meta={"step": 1})  # a meta key
    # every one checked in full, and its reply (but the last's: the first reply's signature)
    assert len(checks) == 4 * 3 - 1 and checks[-1] == ("c", "a", "double")
    checks.clear()
    c.send("a", "double", {"x": x}, meta={"step": 2})
    assert checks == []
    assert t.log.n_messages == 18 and [e.round for e in t.log.entries[:8:2]] == [0, 1, 2, 3]


def test_a_message_of_another_name_or_sender_is_refused_after_its_lane_passed():
    c, t = _fed()
    x = torch.ones(3, 2)
    c.send("a", "double", {"x": x})
    with pytest.raises(PrivacyError, match="forbids 'c'"):
        c.send("a", "double", {"z": x})
    a = t.local["a"]
    with pytest.raises(PrivacyError, match="forbids 'a'"):
        a.send("b", "double", {"x": x})  # party to party: no lane of c's lets it through


def test_a_nan_in_a_message_of_a_known_signature_is_refused_naming_its_sender():
    c, t = _fed()
    c.send("a", "double", {"x": torch.ones(3, 2)})
    bad = torch.ones(3, 2)
    bad[1, 1] = float("nan")
    with pytest.raises(ProtocolError, match="'c' sent 'x' with NaN or infinite"):
        c.send("a", "double", {"x": bad})


def test_the_receiver_gets_a_copy_without_the_senders_graph():
    c, t = _fed()
    for _ in range(2):  # the second one by its lane
        x = torch.ones(3, 2, requires_grad=True)
        got = c.send("a", "double", {"x": x * 1})
        assert not got.arrays["h"].requires_grad
    seen = []
    t.local["a"].handle = lambda msg: (
        seen.append(msg.arrays["x"]),
        Doubler.handle(t.local["a"], msg),
    )[1]
    y = torch.ones(3, 2)
    c.send("a", "double", {"x": y})
    seen[0].add_(1)
    assert float(y.sum()) == 6.0


def test_a_numpy_message_of_a_known_signature_is_copied_little_endian():
    c, t = _fed()
    for _ in range(2):
        x = np.arange(6, dtype=">f8").reshape(3, 2)
        got = c.send("a", "double", {"x": x})
        assert got.arrays["h"].dtype == np.dtype("<f8")
        np.testing.assert_array_equal(got.arrays["h"], 2 * x)


def test_the_log_counts_what_threads_recorded_lazily_in_order():
    """Entries and handler seconds recorded by several threads (beyond ``FOLD_EVERY``): every
    one counted, kept within the budget, the seconds summed as they came."""
    log = MessageLog(max_entries=FOLD_EVERY)
    entries = [LogEntry(s, "c", 1, "k", ("h",), ((2,),), 10) for s in ("a", "b")]
    n = FOLD_EVERY + 7

    def work(entry):
        for _ in range(n):
            log.record(entry)
            log.add_seconds(entry.sender, 0.5)

    threads = [threading.Thread(target=work, args=(e,)) for e in entries]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    s = log.summary()
    assert s["messages"] == 2 * n and s["total_bytes"] == 20 * n
    assert s["dropped_entries"] == {"a": 7, "b": 7} and len(log.entries) == 2 * FOLD_EVERY
    assert log.handler_seconds == {"a": 0.5 * n, "b": 0.5 * n}
    assert log.crossings() == {"a -> c": ["h"], "b -> c": ["h"]}
