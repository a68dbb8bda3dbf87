"""Parties and the coordinator: party-local state plus message handlers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import numpy as np

from fedviews.errors import ConfigError, ProtocolError
from fedviews.federation._message import Message, MetaValue
from fedviews.federation._tensors import Array, Backward, Blame

if TYPE_CHECKING:
    from fedviews.federation._log import MessageLog
    from fedviews.federation._record import Recording

F = TypeVar("F", bound=Callable[..., Any])


class Sender(Protocol):
    """What a party sends through: its transport (a :class:`~fedviews.federation.Transport`
    attaches itself when it registers the party). Requests out, their replies back, and
    the log that records them."""

    log: MessageLog

    def request(self, msg: Message) -> Message:
        """Deliver ``msg`` to ``msg.receiver`` and return its reply."""
        ...

    def request_many(self, msgs: list[Message]) -> list[Message]:
        """Deliver several messages; the replies in the same order."""
        ...


def handles(kind: str) -> Callable[[F], F]:
    """Register a :class:`Party` method as the handler of messages of ``kind``.

    The handler receives the incoming :class:`Message` and returns the reply
    (a :class:`Message`, usually built with :meth:`Party.reply`) or ``None``
    for a bare acknowledgement.
    """

    if not isinstance(kind, str) or not kind or kind.endswith(":reply"):
        raise ConfigError(
            f"@handles takes a message kind, a non-empty string (not a reply's '...:reply'), "
            f"got {kind!r}"
        )

    def deco(fn: F) -> F:
        fn.__dict__["_fedviews_kind"] = kind  # read back by Party.__init_subclass__
        return fn

    return deco


class Party:
    """A participant: private state that never leaves it, plus message handlers.

    Subclasses keep their private arrays as ordinary attributes and decorate
    methods with :func:`handles`. They talk to other parties only through
    :meth:`send` / :meth:`broadcast`, which go through the transport (privacy
    policy, message log, byte counts).
    """

    _handlers: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            own: dict[str, str] = {}
            for attr, val in vars(klass).items():
                kind = getattr(val, "_fedviews_kind", None)
                if kind is None:
                    continue
                if kind in own:
                    raise ProtocolError(
                        f"{klass.__name__} registers two handlers of {kind!r}: "
                        f"{own[kind]} and {attr}"
                    )
                own[kind] = attr
            handlers.update(own)
        cls._handlers = handlers

    def __init__(self, name: str, role: str = "party") -> None:
        for what, value in (("name", name), ("role", role)):
            if not isinstance(value, str) or not value.strip() or "->" in value:
                raise ConfigError(  # ("a -> b" names a link in the message log)
                    f"a party's {what} is a non-empty string without '->', got {value!r}"
                )
        self.name = name
        self.role = role
        self.transport: Sender | None = None
        self.round = 0
        #: what this party receives is copied here when set (:meth:`record`)
        self.recording: Recording | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, role={self.role!r})"

    #: attributes that a pickled party holds as new (the value of ``factory()``): what it
    #: keeps between messages for ``blame`` (closures, the last batch's tensors)
    _transient: ClassVar[Mapping[str, Callable[[], Any]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(vars(self))
        for name, factory in self._transient.items():
            if name in state:
                state[name] = factory()
        return state

    # -- checkpoints -----------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """This party's private state at a round boundary (a checkpoint; it never leaves).

        A party whose state changes over rounds overrides this and :meth:`load_state`
        so that a run resumed from the checkpoint equals the uninterrupted one.
        """
        return {}

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`."""
        if state:
            raise ProtocolError(
                f"{type(self).__name__} keeps no state but was given {sorted(state)}"
            )

    # -- receiving -------------------------------------------------------
    def record(self, recording: Recording) -> Recording:
        """Copy every message delivered to this party into ``recording`` from now on: the
        requests it handles and the replies to what it sends (its view, for attacks)."""
        self.recording = recording
        return recording

    def _received(self, replies: list[Message]) -> list[Message]:
        if self.recording is not None:
            for r in replies:
                self.recording.add(r)
        return replies

    def handle(self, msg: Message) -> Message:
        """Dispatch ``msg`` to the handler registered for its kind."""
        if self.recording is not None:
            self.recording.add(msg)
        attr = self._handlers.get(msg.kind)
        if attr is None:
            raise ProtocolError(
                f"party {self.name!r} has no handler for message kind {msg.kind!r}; "
                f"it handles {sorted(self._handlers)}"
            )
        self.round = msg.round
        reply = getattr(self, attr)(msg)
        if reply is None:
            reply = self.reply(msg)
        if not isinstance(reply, Message):
            raise ProtocolError(
                f"handler {type(self).__name__}.{attr} must return a Message or None"
            )
        return reply

    def stage(self, msg: Message) -> Backward | None:
        """The backward pass that handling ``msg`` starts with, to run before its handler.

        A transport that hosts several receivers of one :meth:`scatter` calls this for
        every one of them (after its checks of the message, before logging it), runs the
        backward passes they return as one (one ``torch.autograd.backward``),
        then each one's ``then`` and its handler. The handler must then skip what it
        staged: with or without staging, the party ends up in the same state. Since the
        ``then`` (an optimiser step) runs before the handler, this checks everything of
        ``msg`` that the handler would refuse (a refused request changes nothing). Default:
        nothing to stage.
        """
        return None

    def reply(
        self,
        msg: Message,
        arrays: Mapping[str, Array] | None = None,
        meta: Mapping[str, MetaValue] | None = None,
        *,
        blame: Blame | None = None,
    ) -> Message:
        """Build the reply to ``msg``. ``blame``: as for :meth:`scatter`."""
        return _blamed(
            self._message(msg.sender, f"{msg.kind}:reply", arrays, meta, msg.round), blame
        )

    # -- sending ---------------------------------------------------------
    def _transport(self) -> Sender:
        if self.transport is None:
            raise ProtocolError(f"party {self.name!r} is not attached to a transport")
        return self.transport

    def _message(
        self,
        receiver: str,
        kind: str,
        arrays: Mapping[str, Array] | None,
        meta: Mapping[str, MetaValue] | None,
        round: int | None,
    ) -> Message:
        rnd = self.round if round is None else round
        return Message.made(kind, self.name, receiver, rnd, arrays or {}, meta or {})

    def send(
        self,
        receiver: str,
        kind: str,
        arrays: Mapping[str, Array] | None = None,
        meta: Mapping[str, MetaValue] | None = None,
        round: int | None = None,
    ) -> Message:
        """Send a message to ``receiver`` and return its reply."""
        msg = self._message(receiver, kind, arrays, meta, round)
        return self._received([self._transport().request(msg)])[0]

    def broadcast(
        self,
        receivers: list[str],
        kind: str,
        arrays: Mapping[str, Array] | None = None,
        meta: Mapping[str, MetaValue] | None = None,
        round: int | None = None,
    ) -> dict[str, Message]:
        """Send the same message to every receiver; return their replies by name.

        The transport may deliver them concurrently (e.g. over gRPC every party
        computes in parallel); replies are returned by receiver name either way.
        """
        return self.scatter(kind, dict.fromkeys(receivers, arrays or {}), meta, round)

    def scatter(
        self,
        kind: str,
        arrays: Mapping[str, Mapping[str, Array]],
        meta: Mapping[str, MetaValue] | None = None,
        round: int | None = None,
        meta_for: Mapping[str, Mapping[str, MetaValue]] | None = None,
        *,
        blame: Blame | None = None,
    ) -> dict[str, Message]:
        """Send ``arrays[receiver]`` to every receiver (one message each); replies by name.

        ``meta`` goes to everyone, ``meta_for[receiver]`` (if given) is added for that
        receiver only. Like :meth:`broadcast`, the transport may deliver them
        concurrently; the messages are built and listed in the order of ``arrays``.
        ``blame`` (:func:`~fedviews.federation.largest_input`), where the arrays were
        computed from what other parties sent: one that is not finite is refused naming the
        party whose values made it overflow, not this one (:meth:`Message.sender_blame`).
        """
        transport = self._transport()
        msgs = [
            _blamed(
                self._message(
                    r, kind, a, {**(meta or {}), **((meta_for or {}).get(r) or {})}, round
                ),
                blame,
            )
            for r, a in arrays.items()
        ]
        replies = self._received(transport.request_many(msgs))
        return dict(zip(arrays, replies, strict=True))


def _blamed(msg: Message, blame: Blame | None) -> Message:
    """``msg`` with its sender's ``blame`` (:meth:`Message.sender_blame`), if any."""
    if blame is not None:
        object.__setattr__(msg, "_blame", blame)
    return msg


class Coordinator(Party):
    """The party that drives the protocol (server, aggregator or orchestrator).

    Subclasses implement :meth:`run`, which drives rounds by sending messages to
    the parties and returns the algorithm's (non-private) result, and usually
    :meth:`progress` and :meth:`summary`.
    """

    def __init__(self, name: str = "coordinator", role: str = "coordinator") -> None:
        super().__init__(name, role)

    def run(self) -> Any:  # pragma: no cover - abstract
        """Drive the protocol to its end. An algorithm's coordinator defines
        ``run(self, on_round_end=None)`` and calls ``on_round_end(r)`` after round ``r`` (a
        deployment writes its checkpoint there): :meth:`Algorithm.run_coordinator` calls
        ``run(on_round_end)``. (The session's own coordinators take nothing.)"""
        raise NotImplementedError

    def progress(self) -> list[str]:
        """One line per finished round (a deployed coordinator prints the new ones)."""
        return []

    def summary(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(metrics for results.json, arrays for result.npz)`` at the end."""
        return {}, {}
