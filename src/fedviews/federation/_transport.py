"""Transports: how messages travel (algorithms only ever see this interface), and wiring
parties to one."""

from __future__ import annotations

import contextlib
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from fedviews.errors import FedViewsError, PartyUnavailable, ProtocolError, RemoteError
from fedviews.federation._handover import FiniteChecks, handed_over
from fedviews.federation._lean import MAX_LANES, Lane, lane_of, signature, take
from fedviews.federation._lend import Lends
from fedviews.federation._log import LogEntry, MessageLog
from fedviews.federation._message import Header, Message
from fedviews.federation._party import Party
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._tensors import Backward, backward

T = TypeVar("T")
#: a staged backward pass: its party, the message it staged it for, the pass
Staged = tuple[Party, Message, Backward]


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

    def check_send(self, msg: Message) -> None:
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
        self._check_receive(head)
        self._record(head, wire_bytes)

    def _check_receive(self, head: Header) -> None:
        """The receiver's policy check of a message, by its header."""
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

    def _record(self, head: Header, wire_bytes: int) -> None:
        """Record a message (checked) in the log with its wire size."""
        self.log.record(head.entry(wire_bytes))

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
        reply = self._as_party(party, msg, lambda: party.handle(msg))
        self._check_reply(msg, reply)
        return reply

    def _as_party(self, party: Party, msg: Message, fn: Callable[[], T]) -> T:
        """``fn()``, the work of ``party`` (hosted here) on ``msg``, timed in the log as its
        handler's."""
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.log.add_seconds(party.name, time.perf_counter() - t0)

    def _loopback(self, party: Party, msg: Message) -> Message:
        """Deliver ``msg`` to ``party`` (hosted here) as over a wire: policy-checked and logged
        both ways, encoded and decoded, so the receiver never shares memory with the sender."""
        self.check_send(msg)
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
    gRPC run), but it is handed over without a host round trip (``_handover``): numpy
    arrays as copies, torch tensors as detached copies on their device. The receiver never
    shares memory nor an autograd graph with the sender, but for a tensor its sender lent
    (:func:`~fedviews.federation.lend`: one it never writes again), handed over as a
    detached alias, read-only: a write into it is refused naming its receiver (``_lend``).

    The floating-point tensors are checked finite on their device without a host
    synchronisation per message (``FiniteChecks``): each one on an accelerator gets one
    reduction when it is handed over (a CPU tensor is read at once: no synchronisation
    there), and the transport reads them all at once when the outermost
    :meth:`request` or :meth:`request_many` returns (before its reply reaches the code that
    called it: the coordinator's run, so no round ends, no checkpoint is written and no
    result leaves the run before the tensors that led to it are checked), when one of
    them fails (so the NaN a tensor brought is refused as its sender's, never blamed on
    the party it made fail), and every ``FiniteChecks.limit`` tensors. A NaN or an
    infinity is refused by a :class:`ProtocolError` naming its sender and the array, as on
    delivery; its receiver may have computed with it in between, which in one process
    changes nothing that outlives the failed run (a wire's receiver checks every array on
    arrival, :meth:`Message.array` and :meth:`Message.tensor`). The refusal is raised
    again by every request until the outermost one has raised it, so a handler that
    catches it cannot make the run go on. Each thread has its own checks and outermost
    request: threads that share the transport are neither refused for nor settle each
    other's tensors.

    ``batch_backward``: the messages of one :meth:`request_many` (a party's
    :meth:`~Party.scatter`) to distinct parties are all checked and handed over first, in
    one pass (their tensors' finiteness checks queued in one call);
    the backward passes their receivers stage (:meth:`Party.stage`, e.g. the data owners'
    bottoms of split learning) run as one ``torch.autograd.backward``, then every handler
    runs in order. The messages, their checks and the log (its order too) are those of
    one request after the other (``batch_backward=False``), and so is every party's
    state: the graphs are disjoint, so each parameter gets the same gradient.
    """

    def __init__(
        self, policy: PrivacyPolicy, *, keep_entries: bool = True, batch_backward: bool = True
    ) -> None:
        super().__init__(policy, keep_entries=keep_entries)
        self.parties = self.local
        self.batch_backward = batch_backward
        #: the finiteness checks of the tensors handed over, deferred
        self.checks = FiniteChecks()
        #: the tensors handed over lent, checked unwritten (``_lend``)
        self.lends = Lends()
        self._calls = threading.local()  # the requests under way in this thread (.depth)
        #: the lanes of the signatures met (``_lean``), by (request or reply, signature)
        self._lanes: dict[tuple[bool, tuple[Any, ...]], Lane] = {}
        self._lanes_policy = policy  # (the policy they passed: another one forgets them)

    def _receiver(self, msg: Message) -> Party:
        """The party hosted here that ``msg`` goes to (its sender must be one too)."""
        party = self.local.get(msg.receiver)
        if party is None:
            raise PartyUnavailable(msg.receiver, "no such party in this federation")
        if msg.sender not in self.roles:
            raise ProtocolError(f"unknown sender {msg.sender!r}")
        return party

    def request(self, msg: Message) -> Message:
        return self._settled(partial(self._request, msg))

    def _request(self, msg: Message) -> Message:
        party, got = self._delivered(msg, request=True)
        return self._hand_over(self._handle(party, got))

    def _delivered(self, msg: Message, *, request: bool) -> tuple[Party, Message]:
        """:meth:`_taken` of ``msg`` alone, its finiteness checks queued, logged."""
        handed: list[tuple[Message, Mapping[str, Any]]] = []
        try:
            party, got, entry = self._taken(msg, handed, request=request)
        finally:  # (its tensors, also where a check refused it)
            if handed:
                self.checks.add_many(handed)
        self.log.record(entry)
        return party, got

    def _taken(
        self, msg: Message, handed: list[tuple[Message, Mapping[str, Any]]], *, request: bool
    ) -> tuple[Party, Message, LogEntry]:
        """Every check of ``msg`` (a request, or a reply) but its finiteness: its receiver
        (hosted here, the one returned; a reply's may be any party of the federation), the
        policy at the sender (a request) and the receiver, its header and arrays as decoding
        checks them; the message its receiver gets (its floating-point tensors appended to
        ``handed`` for the finiteness checks, also where a check refused it) and its log
        entry. Done once per signature (``_lean``): a message of a signature met before
        passed them all by construction. A tensor its sender lent is handed over as an
        alias (``_lend``); what its receiver lent before is checked unwritten first."""
        self.lends.verify(msg.receiver)
        lent: list[tuple[str, Any]] = []
        key = signature(msg)
        if key is not None:
            if self._lanes_policy is not self.policy:
                self._lanes.clear()
                self._lanes_policy = self.policy
            lane = self._lanes.get((request, key))
            if lane is not None and (took := take(lane, msg, lent)) is not None:
                got, floats, entry = took
                if floats:
                    handed.append((got, floats))
                if lent:
                    self.lends.add(msg, lent)
                return lane.party, got, entry  # type: ignore[return-value]
        party = self._receiver(msg) if request else self.local.get(msg.receiver)
        if request:
            self.check_send(msg)
        got, head, wire_bytes, floats = handed_over(msg, lent)
        if floats:
            handed.append((got, floats))
        self._check_receive(head)
        if lent:
            self.lends.add(msg, lent)
        entry = head.entry(wire_bytes)
        if key is not None and len(self._lanes) < MAX_LANES:
            lane = lane_of(msg, party, head, wire_bytes, floats)
            if lane is not None:
                lane.entry = entry
                self._lanes[request, key] = lane
        return party, got, entry  # type: ignore[return-value]

    def request_many(self, msgs: list[Message]) -> list[Message]:
        return self._settled(partial(self._request_many, msgs))

    def _settled(self, deliver: Callable[[], T]) -> T:
        """``deliver()`` (a request or several), after which the deferred finiteness checks
        are settled if it was the outermost one, or if it failed (see the class)."""
        depth = getattr(self._calls, "depth", 0)
        self._calls.depth = depth + 1
        try:
            out = deliver()
        except Exception as exc:
            if not depth:
                self.lends.settle(failed=True)
            self.checks.settle(exc, outermost=not depth)
            raise
        finally:
            self._calls.depth = depth
        if not depth:
            try:
                self.checks.settle(outermost=True)
            except BaseException:
                self.lends.settle(failed=True)
                raise
            self.lends.settle()
        return out

    def _request_many(self, msgs: list[Message]) -> list[Message]:
        if not self._staged_delivery(msgs):
            return super().request_many(msgs)
        delivered = []
        handed: list[tuple[Message, Mapping[str, Any]]] = []
        try:  # every check of request(), before any handler runs
            for msg in msgs:
                delivered.append(self._taken(msg, handed, request=True))
        finally:  # (the tensors handed over so far, also where one message was refused)
            if handed:
                self.checks.add_many(handed)
        staged = [
            (party, got, s)
            for party, got, _ in delivered
            if (s := self._as_party(party, got, partial(party.stage, got))) is not None
        ]
        self._backward(staged)
        replies = []
        for party, got, entry in delivered:
            self.log.record(entry)
            replies.append(self._hand_over(self._handle(party, got)))
        return replies

    def _staged_delivery(self, msgs: list[Message]) -> bool:
        """Whether ``msgs`` are delivered staged: with ``batch_backward``, to distinct
        parties, and by this class's :meth:`request` (a subclass that overrides it, e.g. to
        watch or to encode every message, gets them through it one after the other)."""
        return (
            self.batch_backward
            and type(self).request is InProcessTransport.request
            and len({m.receiver for m in msgs}) == len(msgs)
        )

    def _backward(self, staged: list[Staged]) -> None:
        """The staged backward passes as one; then each one's ``then`` (its optimiser step),
        those that carry the same ``together`` as one call of it."""
        if not staged:
            return
        self._joint(staged, "backward pass", lambda: backward([s for _, _, s in staged]))
        groups: dict[Callable[[Sequence[Callable[[], None]]], None], list[Staged]] = {}
        for entry in staged:
            if entry[2].together is not None:
                groups.setdefault(entry[2].together, []).append(entry)
        for together, same in groups.items():
            if len(same) > 1:
                steps = [s.then for _, _, s in same]
                self._joint(same, "optimiser step", partial(together, steps))
        for party, got, s in staged:
            if s.together is None or len(groups[s.together]) == 1:
                self._as_party(party, got, s.then)

    def _joint(self, staged: list[Staged], what: str, run: Callable[[], None]) -> None:
        """``run()``, the work of all the ``staged`` parties at once (``what``): its time
        shared equally by them, a failure naming them all."""
        t0 = time.perf_counter()
        try:
            run()
        except Exception as exc:
            names = [party.name for party, _, _ in staged]
            raise ProtocolError(f"the {what} that {names} staged together failed: {exc!r}") from exc
        share = (time.perf_counter() - t0) / len(staged)
        for party, _, _ in staged:
            self.log.add_seconds(party.name, share)

    def _hand_over(self, msg: Message) -> Message:
        """``msg`` as its receiver gets it, after the receiver's policy check, logged with
        its wire size."""
        return self._delivered(msg, request=False)[1]

    def _as_party(self, party: Party, msg: Message, fn: Callable[[], T]) -> T:
        t0 = time.perf_counter()  # (timed here, not by the base class: one call less)
        try:
            return fn()
        except FedViewsError as exc:  # its own refusal, as it is (where it failed: ``at``)
            if exc.at is None:
                exc.at = msg.receiver
            raise
        except Exception as exc:  # its handler failed: named, as a deployment reports it
            raise RemoteError(msg.receiver, type(exc).__name__, _failure_text(msg, exc)) from exc
        finally:
            self.log.add_seconds(party.name, time.perf_counter() - t0)


def _failure_text(msg: Message, exc: Exception) -> str:
    """What a party whose handler of ``msg`` raised ``exc`` reports (a gRPC party's error
    reply says ``str(exc)``; here, where the receiver raised it, also which message)."""
    return f"{exc} (handling {msg.kind!r} from {msg.sender!r})"


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


@contextlib.contextmanager
def attributed(peer: str, what: str) -> Iterator[None]:
    """The one place where a failure to take in what ``peer`` sent is attributed: whatever
    goes wrong inside is ``peer``'s doing, never the local party's nor a third party's.

    ``peer`` is who the receiver knows sent it (the authenticated end of the link, the
    node the reply came from), never what the message's header claims. A fedviews error
    keeps its type and names ``peer`` (``party``, and its text); one that named another
    party (e.g. a :class:`PartyUnavailable` for a receiver that ``peer`` made up) or any
    other exception (a decoder's ``TypeError``) becomes a :class:`ProtocolError` naming
    ``peer``. An error reply is ``peer``'s report: :func:`raise_remote` names its
    reporter, and the :class:`RemoteError` passes unchanged.
    """
    try:
        yield
    except RemoteError:
        raise
    except FedViewsError as exc:
        if exc.party not in (None, peer):
            raise ProtocolError(f"{what} from {peer!r}: {exc}", party=peer) from exc
        if exc.party is None and repr(peer) not in str(exc):  # its text names the peer too
            exc.args = (f"{what} from {peer!r}: {exc}",)
        exc.party = peer
        raise
    except Exception as exc:
        raise ProtocolError(
            f"{what} from {peer!r} is malformed: {type(exc).__name__}: {exc}", party=peer
        ) from exc
