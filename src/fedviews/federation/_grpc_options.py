"""Timing and size settings of the gRPC transport, shared by the hub and the parties."""

from __future__ import annotations

from dataclasses import dataclass

_MB = 1024 * 1024


@dataclass(frozen=True)
class GrpcOptions:
    """Timing and size settings shared by the hub and the parties.

    Parameters
    ----------
    timeout : float
        Seconds of silence (no frame, not even a heartbeat) after which a peer is
        declared unavailable.
    heartbeat : float
        Seconds between heartbeat frames.
    request_timeout : float
        Deadline of one request (its handler's whole computation), in seconds.
    connect_timeout : float
        Seconds to wait for each connection attempt (and for all parties to join).
    connect_retries : int
        Connection attempts before a party gives up.
    backoff : float
        First pause between connection attempts (doubled after each failure).
    chunk_size : int
        Bytes per frame; messages larger than this are split.
    max_message_bytes : int
        The largest message a receiver reassembles; a peer that announces a larger
        one (its chunk count times ``chunk_size``) is cut off, named.
    max_incomplete : int
        Messages a peer may have half-sent at once (their chunks are held in memory).
    max_buffered_bytes : int
        Bytes of half-sent messages held from all peers together (each peer may hold
        ``max_message_bytes``); past it the peer holding the most is cut off, named.
    max_streams_per_peer : int
        Streams one certificate may have open to a listener at once, hello-less ones
        included (the rest are refused at once, naming it).
    max_connections : int
        Connections a listener accepts at once (at most half the process's descriptor
        limit); one that starts no call within ``hello_timeout`` is closed.
    max_log_entries : int
        Messages of one sender the message log keeps one by one (beyond, only counted).
    hello_timeout : float
        Seconds a new stream may take to say hello before the hub cancels it (and a new
        connection to finish its handshake and start a call).
    end_to_end : bool
        With TLS, seal every party-to-party payload between the two parties
        (:mod:`fedviews.federation._e2e`): the hub relays it but can neither read
        nor alter it. The hub and every party must agree (a mismatch is refused at
        join, or at the first party-to-party message, with a clear error).
    direct_timeout : float
        Seconds one attempt to open a direct link to a peer's declared endpoint may
        take (two attempts; then its messages go through the hub). The deployment
        config's ``federation.direct_timeout``.
    """

    timeout: float = 20.0
    heartbeat: float = 2.0
    request_timeout: float = 3600.0
    connect_timeout: float = 30.0
    connect_retries: int = 8
    backoff: float = 0.5
    chunk_size: int = 2 * _MB
    max_message_bytes: int = 1024 * _MB
    max_incomplete: int = 64
    max_buffered_bytes: int = 2048 * _MB
    max_streams_per_peer: int = 4
    max_connections: int = 256
    max_log_entries: int = 1_000_000
    hello_timeout: float = 10.0
    end_to_end: bool = True
    direct_timeout: float = 5.0

    def channel_options(self) -> list[tuple[str, int]]:
        limit = self.chunk_size + 64 * 1024
        return [
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
            ("grpc.keepalive_time_ms", int(max(self.heartbeat, 1.0) * 5000)),
            ("grpc.keepalive_timeout_ms", int(self.timeout * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
