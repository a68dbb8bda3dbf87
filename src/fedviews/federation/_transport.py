"""Transports: how messages travel (algorithms only ever see this interface), and wiring
parties to one."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

from fedviews.errors import FedViewsError, PartyUnavailable, ProtocolError
from fedviews.federation._log import LogEntry, MessageLog
from fedviews.federation._message import Header, Message
from fedviews.federation._party import Party
from fedviews.federation._policy import PrivacyPolicy


class Transport(ABC):
    """Carries request/reply messages between named parties.

    Every transport enforces the algorithm's :class:`PrivacyPolicy` on every
    outgoing message (requests and replies) and records it in :attr:`log`.
    """

    def __init__(self, policy: PrivacyPolicy, *, keep_entries: bool = True) -> None:
        self.policy = policy
        self.log = MessageLog(keep_entries=keep_entries)
        self.roles: dict[str, str] = {}
        #: the parties hosted in this process, by name
        self.local: dict[str, Party] = {}

    def register(self, party: Party) -> None:
        """Attach a party hosted in this process (its name must be unique)."""
        if party.name in self.roles:
            raise ProtocolError(f"two parties are named {party.name!r}")
        self.roles[party.name] = party.role
        self.local[party.name] = party
        party.transport = self

    def _check_send(self, msg: Message) -> None:
        """The sender's policy check, before ``msg`` is encoded: a forbidden array never leaves."""
        self.policy.check(
            msg.sender,
            self.roles.get(msg.sender, "?"),
            msg.receiver,
            self.roles.get(msg.receiver, "?"),
            msg.arrays.keys(),
            msg.kind,
        )

    def _check_and_log(self, msg: Message, wire_bytes: int) -> None:
        self._admit(msg.header(), wire_bytes)

    def _admit(self, head: Header, wire_bytes: int) -> None:
        """Enforce the policy on a message (by its header) and record it in the log."""
        if head.receiver not in self.roles:
            raise PartyUnavailable(head.receiver, "no such party in this federation")
        self.policy.check(
            head.sender,
            self.roles.get(head.sender, "?"),
            head.receiver,
            self.roles[head.receiver],
            head.names,
            head.kind,
        )
        self.log.record(
            LogEntry(
                sender=head.sender,
                receiver=head.receiver,
                round=head.round,
                kind=head.kind,
                arrays=head.names,
                shapes=head.shapes,
                nbytes=wire_bytes,
                meta=head.meta,
            )
        )

    @staticmethod
    def _check_reply(msg: Message | Header, reply: Message | Header) -> None:
        """A reply must come from the request's receiver, go back to its sender and be the
        reply to its kind (``<kind>:reply``: another kind would be read as what it is not), of
        the request's round (a forged round would be logged as if the run had reached it)."""
        if reply.receiver != msg.sender or reply.sender != msg.receiver:
            raise ProtocolError(f"party {msg.receiver!r} replied with a misaddressed message")
        if reply.kind != f"{msg.kind}:reply":
            raise ProtocolError(
                f"party {msg.receiver!r} answered {msg.kind!r} with a {reply.kind!r} message"
            )
        if reply.round != msg.round:
            raise ProtocolError(
                f"party {msg.receiver!r} answered {msg.kind!r} of round {msg.round} with a "
                f"reply of round {reply.round}"
            )

    @staticmethod
    def _check_request(head: Message | Header) -> None:
        """A request is never a reply: an unsolicited ``*:reply`` request (it would pass the
        policy as the reply it claims to be) is refused, naming its sender."""
        if head.kind.endswith(":reply"):
            raise ProtocolError(
                f"{head.sender!r} sent {head.kind!r} as a request: a reply answers a request "
                "of its receiver, it is never sent on its own"
            )

    def _handle(self, party: Party, msg: Message) -> Message:
        """Run the handler of ``party`` (hosted here) on ``msg``, timed in the log; check the
        reply's address."""
        t0 = time.perf_counter()
        try:
            reply = party.handle(msg)
        finally:
            self.log.handler_seconds[party.name] += time.perf_counter() - t0
        self._check_reply(msg, reply)
        return reply

    def _loopback(self, party: Party, msg: Message) -> Message:
        """Deliver ``msg`` to ``party`` (hosted here) as over a wire: policy-checked and logged
        both ways, encoded and decoded, so the receiver never shares memory with the sender."""
        self._check_send(msg)
        wire = msg.encode_buffer()
        self._check_and_log(msg, len(wire))
        reply = self._handle(party, Message.decode(wire))
        rwire = reply.encode_buffer()
        self._check_and_log(reply, len(rwire))
        return Message.decode(rwire)

    @abstractmethod
    def request(self, msg: Message) -> Message:
        """Deliver ``msg`` to ``msg.receiver`` and return its reply."""

    def request_many(self, msgs: list[Message]) -> list[Message]:
        """Deliver several messages and return the replies in order.

        Sequential here; transports whose parties run elsewhere override it to
        send concurrently, so that parties compute in parallel.
        """
        return [self.request(m) for m in msgs]


class InProcessTransport(Transport):
    """All parties live in this process; every message is still checked and logged both
    ways as over a wire, and its bytes counted as its encoding's (the footprint of a
    gRPC run), but it is handed over without a host round trip
    (:meth:`Message.handed_over`): numpy arrays as copies, torch tensors as detached
    copies on their device, checked finite there. The receiver never shares memory nor
    an autograd graph with the sender."""

    def __init__(self, policy: PrivacyPolicy, *, keep_entries: bool = True) -> None:
        super().__init__(policy, keep_entries=keep_entries)
        self.parties = self.local

    def request(self, msg: Message) -> Message:
        party = self.local.get(msg.receiver)
        if party is None:
            raise PartyUnavailable(msg.receiver, "no such party in this federation")
        if msg.sender not in self.roles:
            raise ProtocolError(f"unknown sender {msg.sender!r}")
        self._check_send(msg)
        reply = self._handle(party, self._hand_over(msg))
        return self._hand_over(reply)

    def _hand_over(self, msg: Message) -> Message:
        """``msg`` as its receiver gets it, after the receiver's policy check, logged with
        its wire size."""
        got, wire_bytes = msg.handed_over()
        self._check_and_log(got, wire_bytes)
        return got

    def _handle(self, party: Party, msg: Message) -> Message:
        try:
            return super()._handle(party, msg)
        except FedViewsError:
            raise
        except Exception as exc:  # a party crashed: report it by name, keep the cause
            raise PartyUnavailable(
                msg.receiver, f"failed while handling {msg.kind!r}: {exc!r}"
            ) from exc


def federate(
    parties: Sequence[Party],
    policy: PrivacyPolicy,
    transport: Transport | None = None,
) -> Transport:
    """Register ``parties`` on ``transport`` (default: a new in-process one) and return it."""
    t = transport if transport is not None else InProcessTransport(policy)
    for p in parties:
        t.register(p)
    return t
