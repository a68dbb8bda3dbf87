"""Messages: named numpy arrays (or torch tensors) plus small typed metadata, encoded without
pickle.

Wire format (little-endian)::

    b"FVM1" | u32 header_len | header (UTF-8 JSON) | array payloads, concatenated

The JSON header holds ``kind``, ``sender``, ``receiver``, ``round``, ``meta`` (string keys;
str/int/float/bool/None values, integers of at most 64 bits) and, per array, its ``name``,
``dtype`` (numpy ``dtype.str``, e.g. ``"<f8"``), ``shape`` and byte ``size``. Only plain
numeric/bool dtypes are accepted, so decoding never executes code. A receiver's budget
(what one message may make it log): at most ``MAX_META_KEYS`` meta keys of at most
``MAX_KEY_CHARS`` characters, and a ``round`` from 0 to ``MAX_ROUND``.

An array may be a torch tensor (``_tensors``): encoded, it is the numpy array of its values
(converted once); the in-process transport hands it over as a tensor on its device
(``_handover``). A receiver reads either kind with :meth:`Message.tensor`.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, cast

import numpy as np

from fedviews.errors import ProtocolError
from fedviews.federation._log import LogEntry
from fedviews.federation._meta import check_meta, check_meta_types, shown
from fedviews.federation._tensors import (
    Array,
    Blame,
    allowed_dtype,
    check_array,
    finite_array,
    first_not_finite,
    is_tensor,
    nbytes,
    not_finite,
    numpy_dtype,
    refuse_not_finite,
    refuse_outgoing,
    to_host,
    torch_dtype,
)

if TYPE_CHECKING:
    import torch

MetaValue = str | int | float | bool | None
_MAGIC = b"FVM1"
_MAX_META = 1 << 20  # bytes of a sealed meta table
MAX_ROUND = 2**31 - 1


@dataclass(frozen=True)
class Message:
    """One message between two parties.

    Parameters
    ----------
    kind : str
        What the message is (the receiver's handler is chosen by it).
    sender, receiver : str
        Party names.
    round : int
        Protocol round (for the log and checkpoints).
    arrays : mapping of str to ndarray or torch.Tensor
        Named numeric arrays: the only payload that crosses the privacy barrier. A tensor
        is kept as it is (its autograd graph too: whatever delivers the message detaches
        it, see :meth:`handed_over` and :meth:`layout`).
    meta : mapping of str to scalar
        Small typed metadata (no arrays, no nested objects).
    """

    kind: str
    sender: str = ""
    receiver: str = ""
    round: int = 0
    arrays: Mapping[str, Array] = field(default_factory=dict)
    meta: Mapping[str, MetaValue] = field(default_factory=dict)
    #: names of the floating-point tensors whose finiteness its delivery checks (set by the
    #: in-process hand-over only, ``_handover``, so :meth:`tensor` does not check them again)
    _finite: ClassVar[frozenset[str]] = frozenset()

    def __post_init__(self) -> None:
        vars(self).update(
            _checked(self.kind, self.sender, self.receiver, self.round, self.arrays, self.meta)
        )

    @classmethod
    def made(
        cls,
        kind: str,
        sender: str,
        receiver: str,
        round: int,
        arrays: Mapping[str, Array],
        meta: Mapping[str, MetaValue],
    ) -> Message:
        """``Message(kind, sender, receiver, round, arrays, meta)``, checked the same, without
        the dataclass's field-by-field set-up (what a party sends, once per message)."""
        msg = object.__new__(cls)
        object.__setattr__(msg, "__dict__", _checked(kind, sender, receiver, round, arrays, meta))
        return msg

    @property
    def nbytes(self) -> int:
        """Payload bytes of the arrays (what the log counts)."""
        return sum(nbytes(a) for a in self.arrays.values())

    def number(self, key: str) -> float:
        """The numeric metadata value ``key``, checked by its receiver: a finite number (a
        :class:`ProtocolError` names the sender of anything else, NaN and infinities too)."""
        n = self._numeric(key)
        if not math.isfinite(n):
            raise ProtocolError(
                f"{self.sender!r} sent meta[{key!r}] = {n!r}, expected a finite number",
                party=self.sender,
            )
        return n

    def _numeric(self, key: str) -> float:
        value = self.meta.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(
                f"{self.sender!r} sent meta[{key!r}] = {value!r}, expected a number",
                party=self.sender,
            )
        return float(value)

    def count(self, key: str) -> int:
        """The metadata value ``key`` as a count, checked by its receiver: a positive whole
        number (e.g. a client's ``n_samples``, its FedAvg weight); a :class:`ProtocolError`
        names the sender of anything else."""
        n = self._numeric(key)
        if not (math.isfinite(n) and n >= 1 and n == int(n)):
            raise ProtocolError(
                f"{self.sender!r} sent {key} = {n!r}; a FedAvg weight is a positive sample count",
                party=self.sender,
            )
        return int(n)

    def array(
        self, name: str, shape: tuple[int | None, ...], dtype: type[np.floating] | None = None
    ) -> np.ndarray:
        """The array ``name``, checked by its receiver: present, of ``shape`` (``None``: any
        length on that axis), and if it is floating point, free of NaN and infinities (one
        would poison every model it enters); with ``dtype`` (a float type), it must be
        floating point and is returned as ``dtype`` (still finite). A :class:`ProtocolError`
        names the sender."""
        arr = to_host(self._shaped(name, shape))
        if dtype is not None:
            self._floating(name, arr.dtype.kind == "f", arr.dtype)
            with np.errstate(over="ignore"):  # a value beyond ``dtype``'s range: inf, refused
                arr = arr.astype(dtype, copy=False)
        if not finite_array(arr):
            self._not_finite(name, arr.dtype if dtype is not None else None)
        return arr

    def tensor(
        self,
        name: str,
        shape: tuple[int | None, ...],
        dtype: type[np.floating] | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """The array ``name`` as a torch tensor on ``device`` (default: where it is), checked
        by its receiver as :meth:`array` checks it (present, of ``shape``, finite; with
        ``dtype``, floating point and cast to it).

        A tensor (handed over in one process) is checked where it lives: not again when the
        in-process transport checks its finiteness (deferred, see
        :class:`~fedviews.federation.InProcessTransport`), with one host synchronisation
        otherwise. An array (from a wire) is checked as :meth:`array` does, then moved.
        """
        import torch

        arr = self._shaped(name, shape)
        if not is_tensor(arr):
            return torch.as_tensor(self.array(name, shape, dtype), device=device)
        checked = name in self._finite
        if dtype is not None:
            if not arr.is_floating_point():
                self._floating(name, False, numpy_dtype(arr))
            want = torch_dtype(dtype)
            if arr.dtype != want:  # a narrower type may overflow to inf: checked again
                checked, arr = False, arr.to(want)
        if arr.is_floating_point() and not checked:
            _check_finite(self, {name: arr}, cast=dtype is not None)
        return arr if device is None or arr.device == torch.device(device) else arr.to(device)

    def _shaped(self, name: str, shape: tuple[int | None, ...]) -> Array:
        """The array ``name``, present and of ``shape`` (``None``: any length on that axis)."""
        arr = self.arrays.get(name)
        if arr is None:
            raise ProtocolError(
                f"{self.sender!r} sent {self.kind!r} without the array {name!r}", party=self.sender
            )
        if arr.shape == shape:  # (the common case: every length given, and right)
            return arr
        got = tuple(int(d) for d in arr.shape)
        ok = len(got) == len(shape) and all(
            want is None or g == want for g, want in zip(got, shape, strict=True)
        )
        if not ok:
            want = ", ".join("*" if s is None else str(s) for s in shape) + "," * (len(shape) == 1)
            raise ProtocolError(
                f"{self.sender!r} sent {name!r} of shape {got} in {self.kind!r}, expected ({want})",
                party=self.sender,
            )
        return arr

    def _floating(self, name: str, ok: bool, dtype: object) -> None:
        if not ok:
            raise ProtocolError(
                f"{self.sender!r} sent {name!r} as {dtype} in {self.kind!r}, "
                "expected floating point",
                party=self.sender,
            )

    def sender_blame(self) -> Blame | None:
        """Its sender's ``blame`` (``Party.scatter``): never sent, a receiver names the sender."""
        return cast("Blame | None", vars(self).get("_blame"))

    def _not_finite(self, name: str, dtype: object | None) -> NoReturn:
        raise not_finite(self.sender, self.kind, name, dtype)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: tuple(int(s) for s in a.shape) for k, a in self.arrays.items()}

    def encode(self) -> bytes:
        """Serialise to bytes (no pickle)."""
        return bytes(self.encode_buffer())

    def encode_buffer(self) -> bytearray:
        """Serialise into one freshly allocated, writable buffer (one copy of every array).

        :meth:`decode` of a writable buffer returns arrays that view it without a
        further copy; the in-process transport uses this to keep per-batch split
        learning cheap.
        """
        start, payloads = self._start()
        buf = bytearray(len(start) + sum(c.nbytes for c in payloads))
        buf[: len(start)] = start
        write_arrays(buf, len(start), payloads)
        return buf

    def encode_parts(self) -> list[bytes | memoryview]:
        """The encoding as the buffers that make it up, one after the other: the header,
        then every array's bytes (views of the arrays, not copies).

        For a transport that copies them into its frames anyway (gRPC): the arrays are
        then copied once, straight into the frames, instead of into a buffer first. The
        views are only valid while the arrays are not changed: use them at once.
        """
        start, payloads = self._start()
        return [start, *(c.reshape(-1).view(np.uint8).data for c in payloads)]

    def _start(self) -> tuple[bytes, list[np.ndarray]]:
        head, payloads = self.layout()
        return prefix(self.to_json(head).encode("utf-8")), payloads

    def to_json(self, table: Mapping[str, Any]) -> str:
        """The JSON of ``table``, this message's header table (:meth:`layout`) or its meta:
        a meta table changed since the message was made so that JSON cannot carry it is
        refused as making the message would have been (a :class:`ProtocolError` names the
        message and the key)."""
        try:
            return json.dumps(table, allow_nan=True)
        except (TypeError, ValueError) as exc:
            check_meta_types(self.kind, self.sender, self.meta)
            raise ProtocolError(f"{self.sender!r} cannot encode {self.kind!r}: {exc}") from None

    def layout(self) -> tuple[dict[str, Any], list[np.ndarray]]:
        """The header table and the little-endian, C-ordered arrays of the encoding (a
        tensor's values copied to host memory, here and only here)."""
        payloads = []
        for a in self.arrays.values():
            c = np.asarray(to_host(a), order="C")
            payloads.append(c.astype(_little(c.dtype), copy=False))
        if (blame := self.sender_blame()) is not None:  # its sender's own check
            refuse_outgoing(self.sender, self.kind, list(self.arrays), payloads, blame)
        specs = [_spec(n, c.dtype, c.shape) for n, c in zip(self.arrays, payloads, strict=True)]
        return self._head(specs), payloads

    def _head(self, specs: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "sender": self.sender,
            "receiver": self.receiver,
            "round": int(self.round),
            "meta": dict(self.meta),
            "arrays": specs,
        }

    def header(self) -> Header:
        """What the privacy policy and the log look at (no array data)."""
        return Header(
            kind=self.kind,
            sender=self.sender,
            receiver=self.receiver,
            round=int(self.round),
            names=tuple(self.arrays),
            shapes=tuple(tuple(int(d) for d in a.shape) for a in self.arrays.values()),
            meta=tuple(str(k) for k in self.meta),
        )

    @staticmethod
    def peek(data: bytes | bytearray | memoryview) -> Header:
        """The header of an encoded message, without touching (or copying) its arrays.

        Checks that the array sizes add up to the message length, as :meth:`decode` does.
        """
        head, specs, _ = parse_header(memoryview(data))
        return Header(
            kind=head["kind"],
            sender=head["sender"],
            receiver=head["receiver"],
            round=int(head["round"]),
            names=tuple(str(a["name"]) for a in specs),
            shapes=tuple(tuple(int(d) for d in a["shape"]) for a in specs),
            meta=tuple(str(k) for k in head["meta"]),
        )

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Message:
        """Parse bytes produced by :meth:`encode`; raises ProtocolError on corrupt input.

        Arrays are copies when ``data`` is immutable, and views of ``data`` (no copy)
        when it is a writable buffer that the caller hands over.
        """
        view = memoryview(data)
        owned = not view.readonly
        header, specs, offset = parse_header(view)
        if "sealed" in header:
            raise ProtocolError(
                f"a message of {header['sender']!r} sealed end to end for "
                f"{header['receiver']!r}: only that party can open it"
            )
        msg = cls._of(header, read_arrays(view, offset, specs, copy=not owned))
        refuse_not_finite(msg.sender, msg.kind, msg.arrays)
        return msg

    @classmethod
    def _of(cls, header: Mapping[str, Any], arrays: Mapping[str, Array]) -> Message:
        """The message of a (checked) header table and its arrays."""
        return cls(
            kind=header["kind"],
            sender=header["sender"],
            receiver=header["receiver"],
            round=int(header["round"]),
            arrays=arrays,
            meta=header["meta"],
        )


def _checked(
    kind: Any, sender: Any, receiver: Any, round: Any, arrays: Mapping[Any, Any], meta: Any
) -> dict[str, Any]:
    """The fields of a message, checked (:class:`Message`): its arrays as it carries them and
    a meta table of its own (the caller's may change afterwards)."""
    strings = isinstance(kind, str) and isinstance(sender, str) and isinstance(receiver, str)
    if not (strings and (type(round) is int or _integral(round))):
        raise ProtocolError(
            "a message's kind, sender and receiver are strings and its round an integer, "
            f"got {shown([kind, sender, receiver, round])}"
        )
    carried = {}
    for k, v in arrays.items():
        name = k if type(k) is str else str(k)
        try:
            carried[name] = check_array(name, v)
        except ProtocolError as exc:  # named: whose message, which kind
            raise ProtocolError(f"{sender!r} cannot send {kind!r}: {exc}", party=sender) from None
    own = dict(meta)
    if own:
        check_meta_types(kind, sender, own)
        check_meta(own, sender)
    return {
        "kind": kind,
        "sender": sender,
        "receiver": receiver,
        "round": round,
        "arrays": carried,
        "meta": own,
    }


def _integral(value: Any) -> bool:
    """Whether ``value`` is an integer (``int`` or numpy's, not a bool)."""
    return type(value) is int or (
        isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    )


def _little(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """``dtype`` in little-endian byte order (the wire's)."""
    return dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype


def _spec(name: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> dict[str, Any]:
    """The header entry of an array of ``dtype`` (little-endian) and ``shape``."""
    dims, dtype = [int(d) for d in shape], _little(dtype)
    size = dtype.itemsize * math.prod(dims)
    return {"name": name, "dtype": dtype.str, "shape": dims, "size": size}


def _check_finite(msg: Message, tensors: Mapping[str, torch.Tensor], cast: bool = False) -> None:
    """Refuse ``msg`` if one of its floating-point ``tensors`` (by name; ``cast``: as its
    receiver cast them) holds NaN or infinities (:func:`first_not_finite`): a
    :class:`ProtocolError` names the sender."""
    bad = first_not_finite(tensors)
    if bad is not None:
        msg._not_finite(bad, numpy_dtype(tensors[bad]) if cast else None)


def prefix(header: bytes) -> bytes:
    """The start of an encoded message: magic, header length, header JSON."""
    return _MAGIC + struct.pack("<I", len(header)) + header


def read_arrays(
    view: memoryview, offset: int, specs: list[dict[str, Any]], *, copy: bool
) -> dict[str, np.ndarray]:
    """The arrays ``specs`` describe, one after the other in ``view`` from ``offset`` on:
    views of it (``copy=False``, for a buffer handed over) or copies."""
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        size = int(spec["size"])
        arr = np.frombuffer(view[offset : offset + size], dtype=np.dtype(spec["dtype"]))
        arr = arr.reshape(tuple(spec["shape"]))
        arrays[str(spec["name"])] = arr.copy() if copy else arr
        offset += size
    return arrays


def write_arrays(buf: bytearray | memoryview, offset: int, arrays: list[np.ndarray]) -> None:
    """Copy ``arrays``' bytes into ``buf`` from ``offset`` on, one after the other."""
    out = np.frombuffer(buf, dtype=np.uint8)
    for c in arrays:
        out[offset : offset + c.nbytes] = c.reshape(-1).view(np.uint8)
        offset += c.nbytes


@dataclass(frozen=True)
class Header:
    """A message without its arrays: who, what kind, which round, array names and shapes."""

    kind: str
    sender: str
    receiver: str
    round: int
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    meta: tuple[str, ...] = ()
    #: the log entry :meth:`entry` made last: a class attribute an instance's own shadows, not
    #: a field (``dataclasses.fields``, ``asdict``, equality see no cache)
    _entry: ClassVar[LogEntry | None] = None

    def entry(self, nbytes: int) -> LogEntry:
        """The log entry of a message of this header and ``nbytes`` bytes on the wire: one
        object for the messages of one header and size (in one process the messages of one
        route and round share their header, ``_handover``), which the log counts without
        taking in its names again (:meth:`MessageLog.record`)."""
        entry = self._entry
        if entry is None or entry.nbytes != nbytes:
            head = (self.sender, self.receiver, self.round, self.kind, self.names, self.shapes)
            entry = LogEntry(*head, nbytes, self.meta)
            object.__setattr__(self, "_entry", entry)
        return entry


def parse_header(view: memoryview) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """``(header, array specs, payload offset)``; raises ProtocolError on corrupt input."""
    header = read_header(view)
    specs = list(header["arrays"])
    offset = 8 + struct.unpack("<I", view[4:8])[0]
    total = offset + _sealed_overhead(header)
    for i, spec in enumerate(specs):
        dtype = _check_spec(spec)
        if any(spec["name"] == other["name"] for other in specs[:i]):  # it would replace it
            raise ProtocolError(f"array {shown(spec['name'])} appears twice in the header")
        # Python integers: a shape such as [2**32, 2**32] must not wrap around to 0 bytes
        if spec["size"] != dtype.itemsize * math.prod(spec["shape"]):
            raise ProtocolError(f"array {shown(spec['name'])}: size does not match its shape")
        if dtype.itemsize * math.prod(max(d, 1) for d in spec["shape"]) >= 2**63:  # numpy's bound
            name, shape = shown(spec["name"]), shown(spec["shape"])  # (an empty one: zeros too)
            raise ProtocolError(f"array {name}: no array has the shape {shape}")
        total += spec["size"]
    if total > len(view):
        raise ProtocolError("truncated message payload")
    if total != len(view):
        raise ProtocolError("trailing bytes after message payload")
    return header, specs, offset


def read_header(view: memoryview) -> dict[str, Any]:
    """The header table at the start of ``view``, checked (not its array specs, nor the
    payload's length); raises ProtocolError on corrupt input."""
    if len(view) < 8 or bytes(view[:4]) != _MAGIC:
        raise ProtocolError("not a fedviews message (bad magic)")
    (hlen,) = struct.unpack("<I", view[4:8])
    try:
        header = json.loads(bytes(view[8 : 8 + hlen]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # (ValueError: also a number too long)
        why = "a number of thousands of digits" if "digits" in str(exc) else str(exc)
        raise ProtocolError(f"corrupt message header: {why}") from None
    except RecursionError:
        raise ProtocolError("corrupt message header: nested too deeply") from None
    if not isinstance(header, dict):
        raise ProtocolError("corrupt message header: not a JSON object")
    missing = [
        k for k in ("kind", "sender", "receiver", "round", "meta", "arrays") if k not in header
    ]
    if missing:
        raise ProtocolError(f"corrupt message header: no {missing}")
    names = [header[k] for k in ("kind", "sender", "receiver")]
    round_ = header["round"]
    if not all(isinstance(v, str) for v in names) or type(round_) is not int:
        raise ProtocolError(
            "corrupt message header: 'kind', 'sender' and 'receiver' must be strings and "
            f"'round' an integer, got {shown(names + [round_])}"
        )
    if not isinstance(header["arrays"], list) or not isinstance(header["meta"], dict):
        raise ProtocolError(
            f"{names[1]!r} sent a corrupt message header: 'arrays' must be a list and 'meta' an "
            f"object, got {shown(header['arrays'])} and {shown(header['meta'])}"
        )
    if not 0 <= round_ <= MAX_ROUND:
        raise ProtocolError(
            f"{header['sender']!r} sent a message of round {round_}; rounds run from 0 to "
            f"{MAX_ROUND}"
        )
    check_meta(header["meta"], header["sender"])
    return header


def _count(value: Any) -> bool:
    """Whether ``value`` is a JSON whole number >= 0 (not a bool, not a float such as 3.0)."""
    return type(value) is int and value >= 0


def _check_spec(spec: Any) -> np.dtype[Any]:
    """The dtype of one array spec of a header, after checking its fields' types: a string
    name and dtype, a shape of whole numbers >= 0, a byte size >= 0 (a ProtocolError else)."""
    if not isinstance(spec, dict) or not {"name", "dtype", "shape", "size"} <= set(spec):
        raise ProtocolError(
            f"corrupt array spec {shown(spec)}: expected name, dtype, shape and size"
        )
    shape = spec["shape"]
    if (
        not isinstance(spec["name"], str)
        or not isinstance(spec["dtype"], str)
        or not isinstance(shape, list)
        or not all(_count(d) for d in shape)
        or not _count(spec["size"])
    ):
        raise ProtocolError(
            f"corrupt array spec {shown(spec)}: name and dtype must be strings, shape a list of "
            "whole numbers >= 0 and size a whole number >= 0"
        )
    try:
        dtype = np.dtype(spec["dtype"])
    except (TypeError, ValueError):
        raise ProtocolError(f"corrupt array spec {shown(spec)}: not a numpy dtype") from None
    if not allowed_dtype(dtype):
        raise ProtocolError(f"array {shown(spec['name'])} has forbidden dtype {dtype}")
    return dtype


#: AES-GCM tag after a sealed payload (fedviews.federation._e2e)
SEAL_TAG = 16


def _sealed_overhead(header: Mapping[str, Any]) -> int:
    """Bytes a sealed message carries beyond its arrays (encrypted meta, tag); 0 if not sealed."""
    sealed = header.get("sealed")
    if sealed is None:
        return 0
    try:
        nonce = bytes.fromhex(str(sealed["nonce"]))
        seq, n_meta = int(sealed["seq"]), int(sealed["meta_bytes"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ProtocolError(f"corrupt sealed-message header: {shown(sealed)}") from None
    if len(nonce) != 12 or seq < 1 or not 0 <= n_meta <= _MAX_META or header.get("meta"):
        raise ProtocolError(f"corrupt sealed-message header: {shown(sealed)}")
    return n_meta + SEAL_TAG
