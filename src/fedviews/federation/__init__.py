"""Federation runtime: parties, messages, transports, privacy policy, message log.

An algorithm is written as party-local handlers plus a coordinator that drives
rounds; it never imports a concrete transport. :func:`federate` wires a list of
parties to a transport (in-process by default).
"""

from fedviews.federation._log import LogEntry, MessageLog
from fedviews.federation._message import Message
from fedviews.federation._party import Coordinator, Party, handles
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._run import federate
from fedviews.federation._transport import InProcessTransport, Transport

__all__ = [
    "GrpcHub",
    "GrpcPartyTransport",
    "Coordinator",
    "InProcessTransport",
    "LogEntry",
    "Message",
    "MessageLog",
    "Party",
    "PrivacyPolicy",
    "Transport",
    "federate",
    "handles",
]


def __getattr__(name: str) -> object:
    """The gRPC transports load lazily: they need the ``grpc`` extra."""
    if name in ("GrpcHub", "GrpcPartyTransport"):
        from fedviews.errors import require

        require("grpc", "grpc")
        from fedviews.federation import _grpc

        return getattr(_grpc, name)
    raise AttributeError(f"module 'fedviews.federation' has no attribute {name!r}")
