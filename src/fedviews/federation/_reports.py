"""Error replies: how a transport reports a handler's failure back to the requester (JSON, no
pickle), and how the requester or a relaying hub reads one, naming the party that made it."""

from __future__ import annotations

import json
from typing import NoReturn

from fedviews.errors import ProtocolError, RemoteError

#: characters of an error report's text that are kept (a report is a short message)
_MAX_REPORT = 4000


def error_payload(exc: BaseException, by: str = "") -> bytes:
    """How a transport reports a handler's failure back to the requester (JSON, no pickle).

    ``by``: the party that makes the report, stamped by a relaying hub (its own failure,
    or the report of the party it relayed to, see :func:`raise_remote`).
    """
    info = {"type": type(exc).__name__, "message": str(exc)}
    return json.dumps({**info, "by": by} if by else info).encode()


def read_report(peer: str, kind: str, data: bytes | bytearray | memoryview) -> tuple[str, str, str]:
    """``(type, text, by)`` of the error reply ``peer`` sent to ``kind`` (:func:`error_payload`);
    a :class:`ProtocolError` naming ``peer`` if it is malformed."""
    try:
        info = json.loads(bytes(data).decode("utf-8"))
        etype, text, by = info["type"], info["message"], info.get("by", "")
    except (UnicodeDecodeError, ValueError, RecursionError, KeyError, TypeError, AttributeError):
        raise ProtocolError(
            f"{peer!r} answered {kind!r} with a malformed error reply", party=peer
        ) from None
    if not all(isinstance(v, str) for v in (etype, text, by)):
        raise ProtocolError(
            f"{peer!r} answered {kind!r} with a malformed error reply (type, message and by "
            "must be strings)",
            party=peer,
        )
    return etype[:100], text[:_MAX_REPORT], by


def stamp_report(peer: str, kind: str, data: bytes | bytearray | memoryview) -> bytes:
    """The error reply ``peer`` sent to ``kind``, as a relaying hub passes it on: stamped
    ``by`` ``peer`` (whatever stamp it wrote itself); a malformed one becomes ``peer``'s
    report that it is malformed."""
    try:
        etype, text, _ = read_report(peer, kind, data)
    except ProtocolError as exc:
        etype, text = "ProtocolError", str(exc)
    return json.dumps({"type": etype, "message": text, "by": peer}).encode()


def raise_remote(
    peer: str, kind: str, data: bytes | bytearray | memoryview, relay: str = ""
) -> NoReturn:
    """Raise the failure that ``peer``'s handler of ``kind`` reported (:func:`error_payload`)
    as ``peer``'s report: a :class:`~fedviews.errors.RemoteError` naming ``peer`` as the
    reporter, never the type or the party its text claims (a dishonest party could blame
    another). ``relay``: the hub the reply came through, which stamps its own reports
    (``by``; it overrides the stamp of the reports it relays), so that one is named as
    its reporter. A malformed report is a :class:`ProtocolError` naming ``peer``."""
    etype, text, by = read_report(peer, kind, data)
    raise RemoteError(relay if relay and by == relay else peer, etype, text)
