"""Budgets per peer: what one peer may hold of a process's memory, streams and connections.

One :class:`Budget` per endpoint (the coordinator's hub, a party's transport with its
direct-link listener) is shared by all its links, so every bound is enforced in one
place:

- **half-sent messages**: a peer may hold at most ``max_message_bytes`` in messages whose
  chunks have not all arrived (an honest sender's chunks of one message are contiguous on
  its link, so it never needs more), and all peers together at most
  ``max_buffered_bytes``. When the total would be exceeded, the peer holding the most is
  cut off, named: the sender of the chunk if that is itself, else the largest holder;
- **streams**: a certificate may have at most ``max_streams_per_peer`` streams open at
  once, hello-less ones included (each holds one of the server's threads);
- **connections**: the server accepts at most ``max_connections`` connections at once
  (fewer when the process's descriptor limit is lower: half of it, so that the run can
  always write its results), closes a connection that starts no call within
  ``hello_timeout``, and a handshake must finish within it too.

The message log keeps its own budget (``max_log_entries`` per sender, meta keys per
pair: :class:`~fedviews.federation.MessageLog`) and the wire format its own limits
(meta keys, header size, round: :func:`~fedviews.federation._message.parse_header`).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from fedviews.errors import ProtocolError
from fedviews.federation._grpc_options import GrpcOptions


class _Holder(Protocol):
    """What a budget needs of a link: its peer's name, whether and why it closed, closing it."""

    peer: str
    reason: str
    closed: threading.Event

    def close(self, reason: str) -> None: ...


_MB = 1024 * 1024


def _size(n: int) -> str:
    return f"{n / _MB:.1f} MiB" if n >= _MB else f"{n / 1024:.0f} KiB"


def descriptor_limit() -> int | None:
    """The process's soft limit on open file descriptors (``None`` where unknown)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


class Budget:
    """The bytes held in half-sent messages and the streams open, per peer and in total.

    Parameters
    ----------
    options : GrpcOptions
        ``max_message_bytes`` (per peer), ``max_buffered_bytes`` (in total),
        ``max_streams_per_peer``, ``max_connections`` and ``hello_timeout``.
    """

    def __init__(self, options: GrpcOptions) -> None:
        self.per_peer = options.max_message_bytes
        self.total = options.max_buffered_bytes
        self.max_streams = options.max_streams_per_peer
        self.options = options
        self.held: dict[_Holder, int] = {}
        self.streams: dict[str, int] = {}
        #: the most bytes ever held in half-sent messages at once (for tests and the docs)
        self.peak = 0
        self._lock = threading.Lock()

    # -- half-sent messages ----------------------------------------------------------
    def hold(self, link: _Holder, n: int) -> None:
        """Charge ``n`` more bytes of a half-sent message to ``link``'s peer; raise a
        :class:`ProtocolError` naming it when that breaks its budget, or close the largest
        holder instead when the total budget is broken by another peer's chunk."""
        victims: list[tuple[_Holder, str]] = []
        with self._lock:
            if link.closed.is_set():  # e.g. cut off by this budget from another thread
                raise ProtocolError(link.reason)
            mine = self.held.get(link, 0) + n
            if mine > self.per_peer:
                raise ProtocolError(
                    f"{link.peer!r} holds {_size(mine)} in half-sent messages; at most "
                    f"{_size(self.per_peer)} (federation.max_message_mb) per peer"
                )
            self.held[link] = mine
            used = sum(self.held.values())
            while used > self.total:
                victim = max(self.held, key=self.held.__getitem__)
                reason = (
                    f"{victim.peer!r} held {_size(self.held[victim])} in half-sent messages, "
                    f"the most of all peers, when they reached {_size(self.total)} together "
                    "(federation.max_buffered_mb)"
                )
                used -= self.held.pop(victim)
                if victim is link:
                    raise ProtocolError(reason)
                victims.append((victim, reason))
            self.peak = max(self.peak, used)
        for victim, reason in victims:  # outside the lock: closing releases what it held
            victim.close(reason)

    def release(self, link: _Holder, n: int | None = None) -> None:
        """``n`` bytes of ``link``'s half-sent messages are no longer held (all: ``None``)."""
        with self._lock:
            left = 0 if n is None else self.held.get(link, 0) - n
            if left > 0:
                self.held[link] = left
            else:
                self.held.pop(link, None)

    @property
    def buffered(self) -> int:
        """Bytes held in half-sent messages now, all peers together."""
        with self._lock:
            return sum(self.held.values())

    # -- streams -----------------------------------------------------------------------
    def open_stream(self, peer: str) -> str | None:
        """Count a new stream of ``peer`` (a certificate's name); the reason to refuse it
        when ``peer`` already holds ``max_streams_per_peer`` streams, else ``None``."""
        with self._lock:
            n = self.streams.get(peer, 0)
            if n >= self.max_streams:
                return (
                    f"{peer!r} already holds {n} streams to this end, at most "
                    f"{self.max_streams} (federation.max_streams_per_peer)"
                )
            self.streams[peer] = n + 1
            return None

    def close_stream(self, peer: str) -> None:
        """One stream of ``peer`` ended."""
        with self._lock:
            n = self.streams.get(peer, 0) - 1
            if n > 0:
                self.streams[peer] = n
            else:
                self.streams.pop(peer, None)

    # -- connections -------------------------------------------------------------------
    def max_connections(self) -> int:
        """Connections the server accepts at once: ``max_connections``, or half the
        descriptor limit where that is lower (the rest stays for the run's own files)."""
        limit = descriptor_limit()
        cap = self.options.max_connections
        return cap if limit is None else max(8, min(cap, limit // 2))

    def server_options(self) -> list[tuple[str, Any]]:
        """gRPC server arguments that bound the connections (see the module docstring)."""
        ms = int(self.options.hello_timeout * 1000)
        return [
            ("grpc.max_allowed_incoming_connections", self.max_connections()),
            ("grpc.max_connection_idle_ms", ms),
            ("grpc.server_handshake_timeout_ms", ms),
        ]
