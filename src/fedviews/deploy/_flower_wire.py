"""What a Flower message of fedviews carries (the wire format), and the tags that bind a
node's reply to that node.

Wire: the :meth:`~fedviews.federation.Message.encode` bytes (no pickle) ride in an
``ArrayRecord`` as one ``uint8`` :class:`flwr.app.Array` of serialisation type :data:`STYPE`
(Flower chunks large arrays); a handler failure comes back as a ``ConfigRecord``
``fedviews-error`` and is re-raised as the same :mod:`fedviews.errors` type. Several wire
messages (a party's sealed requests, their sealed replies) ride as the Arrays ``"0"``,
``"1"``, ... of one ``ArrayRecord`` (:func:`pack_all`).

Tags: Flower's SuperLink checks that a reply's ``src_node_id`` is the node its message went
to, but not that this node pushed it. So the ServerApp draws a key per node and sends it in
that node's hello only (:data:`REPLY_KEY`); the node tags every reply with an HMAC-SHA256
under it (:func:`authenticated`, record :data:`AUTH`), over the ID and type of the message
it answers and a digest of its content (:func:`reply_tag`), and the ServerApp takes a reply
only with its node's tag for that message: no node can answer in another's name (and have
it blamed for what it says) or replay one of its earlier replies. The key crosses the
SuperLink in the hello: the tags protect the nodes from each other, not from whoever runs
the SuperLink.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Mapping

from fedviews.errors import PartyUnavailable, ProtocolError, require

require("flwr", "flower")

from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict  # noqa: E402
from flwr.app import Message as FlowerMessage  # noqa: E402

from fedviews.federation import error_payload, raise_remote  # noqa: E402

STYPE = "fedviews.message.v1"  # serialisation type of the Array that carries a Message
ACTION = "fedviews"  # Flower message type "query.fedviews": one fedviews Message
HELLO = "fedviews_hello"  # "query.fedviews_hello": which party is this node?
PING = "fedviews_ping"  # "query.fedviews_ping": echo, to time Flower's message round trip
PEERS = "fedviews_peers"  # "query.fedviews_peers": the other parties' signed end-to-end keys
RESUME = "fedviews_resume"  # "query.fedviews_resume": the sealed replies a handler waits for
SEND = "fedviews-send"  # a node's answer "relay these sealed messages of my party's"
REPLIES = "fedviews-replies"  # the sealed replies to them, in order
_PAYLOAD, _BYTES, _ERROR = "fedviews", "message", "fedviews-error"
AUTH = "fedviews-auth"  # a reply's record of its tag: {"mac": reply_tag(...)}
REPLY_KEY = "reply-key"  # the hello's field of the node's key for its reply tags
REPLY_KEY_BYTES = 32

#: how a SuperNode says who it is (the hint of every error about a node's config)
NODE_CONFIG_HINT = (
    "--node-config \"party='NAME' data='PATH' out='DIR' config='DEPLOY_TOML'\" (its "
    "party, its data file, its run folder and its copy of the deployment config)"
)


def pack(wire: bytes | bytearray) -> RecordDict:
    """A fedviews wire message as Flower content (one uint8 Array, no pickle)."""
    data = bytes(wire)
    arr = Array(dtype="uint8", shape=(len(data),), stype=STYPE, data=data)
    return RecordDict({_PAYLOAD: ArrayRecord({_BYTES: arr})})


def pack_all(wires: list[bytes], record: str) -> RecordDict:
    """Several wire messages, in order, as the Arrays ``"0"``, ``"1"``, ... of ``record``."""
    arrays = {
        str(i): Array(dtype="uint8", shape=(len(w),), stype=STYPE, data=bytes(w))
        for i, w in enumerate(wires)
    }
    return RecordDict({record: ArrayRecord(arrays)})


def unpack_all(content: RecordDict, record: str) -> list[bytes]:
    """The wire messages that :func:`pack_all` put in ``record`` (ProtocolError if malformed)."""
    rec = content.array_records.get(record)
    if rec is None:
        raise ProtocolError(f"the Flower message carries no {record!r} record")
    if sorted(rec.keys()) != sorted(map(str, range(len(rec)))):
        raise ProtocolError(f"the {record!r} record is not numbered 0..{len(rec) - 1}")
    out = []
    for i in range(len(rec)):
        arr = rec[str(i)]
        if arr.stype != STYPE:
            raise ProtocolError(f"unexpected Flower array type {arr.stype!r} (want {STYPE!r})")
        out.append(bytes(arr.data))
    return out


def asks_to_relay(reply: FlowerMessage) -> bool:
    """Whether a node answered with its party's own messages to relay (:data:`SEND`)."""
    return not reply.has_error() and SEND in reply.content.array_records


def unpack(content: RecordDict) -> bytes:
    """The fedviews wire bytes in Flower content made by :func:`pack`."""
    try:
        arr = content.array_records[_PAYLOAD][_BYTES]
    except KeyError:
        raise ProtocolError("the Flower message carries no fedviews message") from None
    if arr.stype != STYPE:
        raise ProtocolError(f"unexpected Flower array type {arr.stype!r} (want {STYPE!r})")
    return bytes(arr.data)


def error_content(exc: BaseException) -> RecordDict:
    """A handler failure as Flower content, re-raised by :func:`node_error` on the ServerApp."""
    return RecordDict({_ERROR: ConfigRecord({"payload": error_payload(exc)})})


def node_error(party: str, kind: str, reply: FlowerMessage) -> None:
    """Raise what a node reported: a fedviews error, or Flower's own error."""
    if reply.has_error():
        err = reply.error
        raise PartyUnavailable(party, f"Flower error {err.code} on {kind!r}: {err.reason}")
    records = reply.content.config_records
    if _ERROR in records:
        payload = records[_ERROR].get("payload")
        if not isinstance(payload, bytes):
            raise ProtocolError(f"{party!r} answered {kind!r} with a malformed error", party=party)
        raise_remote(party, kind, payload)


def _content_digest(content: RecordDict) -> bytes:
    """SHA-256 of every record of ``content`` but :data:`AUTH`: the count of records, and
    for each its name, type and count of entries; for each entry its key and either an
    array's dtype, dimensions, serialisation type and bytes or a config value with its type
    (:func:`_value_fields`). Every field is prefixed with its length, so the sequence reads
    back one way only: two contents have one digest only if Flower carries them alike."""
    h = hashlib.sha256()

    def put(b: bytes) -> None:
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)

    records = sorted((n, r) for n, r in content.items() if n != AUTH)
    put(str(len(records)).encode())
    for name, record in records:
        put(name.encode())
        put(type(record).__name__.encode())
        put(str(len(record)).encode())
        for k in sorted(record):
            put(k.encode())
            v = record[k]
            if isinstance(v, Array):
                put(b"array")
                put(v.dtype.encode())
                put(str(len(v.shape)).encode())
                for d in v.shape:
                    put(str(d).encode())
                put(v.stype.encode())
                put(bytes(v.data))
            else:
                for field in _value_fields(v):
                    put(field)
    return h.digest()


def _value_fields(v: object) -> list[bytes]:
    """A config value as fields: its type, then its bytes (a float's IEEE 754 bits, so that
    every NaN and both zeros stay apart); a list: its length, then each item's fields."""
    if isinstance(v, list):
        return [b"list", str(len(v)).encode(), *(f for x in v for f in _value_fields(x))]
    if isinstance(v, bool):
        return [b"bool", b"1" if v else b"0"]
    if isinstance(v, int):
        return [b"int", str(v).encode()]
    if isinstance(v, float):
        return [b"float", struct.pack("<d", v)]
    if isinstance(v, str):
        return [b"str", v.encode()]
    if isinstance(v, bytes):
        return [b"bytes", v]
    raise ProtocolError(f"a Flower record value of type {type(v).__name__}")


def reply_tag(key: bytes, reply_to: str, kind: str, content: RecordDict) -> bytes:
    """The HMAC-SHA256 (Python's :mod:`hmac`) under ``key`` of a reply of type ``kind`` to
    the message with ID ``reply_to``, whose content is ``content`` (its :data:`AUTH` record
    left out): it binds the reply to one message, so that it cannot be replayed for another."""
    said = b"fedviews-reply-v1\0%s\0%s\0" % (reply_to.encode(), kind.encode())
    return hmac.new(key, said + _content_digest(content), hashlib.sha256).digest()


def authenticated(content: RecordDict, key: bytes, request: FlowerMessage) -> RecordDict:
    """``content`` with its tag (:data:`AUTH`) as the reply to ``request``: what a node
    answers, under the key the ServerApp gave it at its hello."""
    meta = request.metadata
    content[AUTH] = ConfigRecord(
        {"mac": reply_tag(key, meta.message_id, meta.message_type, content)}
    )
    return content


def is_tagged(reply: FlowerMessage, keys: Mapping[int, bytes]) -> bool:
    """Whether ``reply`` carries the tag of the node in whose name it comes (its key in
    ``keys``, by node ID) for the message it answers: only that node and the ServerApp know
    the key (and the SuperLink, which carries the hello). A Flower error reply (no content)
    carries none."""
    if reply.has_error():
        return False
    meta = reply.metadata
    key = keys.get(meta.src_node_id)
    record = reply.content.config_records.get(AUTH)
    mac = record.get("mac") if record is not None else None
    if not isinstance(mac, bytes) or key is None:
        return False
    want = reply_tag(key, meta.reply_to_message_id, meta.message_type, reply.content)
    return hmac.compare_digest(mac, want)
