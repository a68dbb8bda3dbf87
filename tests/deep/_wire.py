"""A run whose messages all go through their encoding, as gRPC carries them, to compare
with the in-process run (which hands tensors over on their device)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedviews.federation import InProcessTransport, Message


class WireTransport(InProcessTransport):
    """Parties in one process, every message encoded and decoded (the path of a gRPC hub to
    the parties it hosts): a tensor reaches its receiver as a numpy array."""

    def request(self, msg: Message) -> Message:
        return self._loopback(self.local[msg.receiver], msg)


def assert_same_run(fast: Any, wire: Any) -> None:
    """Two finished :class:`~fedviews.federation.InProcessRun` of one spec: every party and
    the coordinator end in the same state (bit for bit; wall-clock seconds aside), and the
    message logs are equal,
    message by message (sender, receiver, round, kind, arrays, shapes, wire bytes)."""
    pairs = [(fast.coordinator, wire.coordinator)]
    pairs += [(p, wire.parties[n]) for n, p in fast.parties.items()]
    for a, b in pairs:
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        for k in (k for k in sa if "seconds" not in k):
            np.testing.assert_array_equal(sa[k], sb[k], err_msg=f"{a.name}: {k}")
    la, lb = fast.transport.log, wire.transport.log
    assert la.n_messages > 0 and la.to_records() == lb.to_records()
    assert la.summary()["crossing_bytes"] == lb.summary()["crossing_bytes"]


def batched_equals_one_each(run: Any, datas: Any, monkeypatch: Any) -> list[int]:
    """Run ``run`` on ``datas`` in one process with one backward pass per party
    (``batch_backward=False``), then with the staged passes batched (the default), assert
    that the two runs are the same (:func:`assert_same_run`); return how many outputs every
    batched ``torch.autograd.backward`` call took (none in the first run)."""
    import fedviews.federation._transport as transport
    from fedviews.federation import build_in_process

    calls: list[int] = []
    real = transport.backward

    def counted(staged: Any) -> None:
        calls.append(sum(len(s.outputs) for s in staged))
        real(staged)

    monkeypatch.setattr(transport, "backward", counted)
    one_each = build_in_process(
        run, datas, transport=lambda p: InProcessTransport(p, batch_backward=False)
    )
    one_each()
    assert calls == []
    batched = build_in_process(run, datas)
    batched()
    assert_same_run(batched, one_each)
    return calls
