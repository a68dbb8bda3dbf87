"""The meta table of a message (:class:`~fedviews.federation.Message`): what JSON carries as it
is (string keys; str, int of at most 64 bits, float, bool or None values) within the budget of
one message, and how an error text shows what a peer sent (:func:`shown`, bounded)."""

from __future__ import annotations

import json
import reprlib
from collections.abc import Mapping
from typing import Any

from fedviews.errors import ProtocolError

MAX_META_KEYS = 1024
MAX_KEY_CHARS = 256
#: the integers a meta value may be (64 bits, signed or not): JSON carries them exactly, and
#: no reader's limit on the digits of an integer applies (Python's: 4,300)
META_INTS = range(-(2**63), 2**64)


class _Shown(reprlib.Repr):
    """How an error text shows a value a peer sent: bounded (strings, integers, nesting), as a
    header may be megabytes."""

    def __init__(self) -> None:
        super().__init__()  # (keyword arguments only from Python 3.12 on)
        self.maxlevel, self.maxstring, self.maxother, self.maxlong = 3, 80, 80, 40

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 1000:  # (repr refuses an int of more than 4,300 digits)
            return f"<an int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_SHOWN = _Shown()


def shown(value: Any) -> str:
    """``repr(value)``, cut short (strings, integers, nesting): for an error text."""
    return _SHOWN.repr(value)


def check_meta_types(kind: str, sender: str, meta: Mapping[Any, Any]) -> None:
    """Refuse a meta table that JSON does not carry as it is: a key that is not a string (a
    number or ``None`` would arrive renamed, a tuple not at all) or a value that is not a
    str, an int of at most 64 bits, a float, a bool or None. The :class:`ProtocolError`
    names the message (``kind``, ``sender``) and the key."""
    for k, v in meta.items():
        if not isinstance(k, str):
            raise ProtocolError(
                f"{sender!r} sent {kind!r} with the meta key {shown(k)} of type "
                f"{type(k).__name__}: meta keys are strings"
            )
        if v is None or isinstance(v, (str, float)) or (isinstance(v, int) and v in META_INTS):
            continue
        cls = type(v)
        typ = cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"
        what = "an int beyond 64 bits" if isinstance(v, int) else f"of type {typ}"
        raise ProtocolError(
            f"{sender!r} sent {kind!r} with meta[{shown(k)}] = {shown(v)}, {what}: meta "
            "values are str, int (64 bits), float, bool or None"
        )


def check_meta(meta: Mapping[Any, Any], sender: str) -> None:
    """Refuse a meta table beyond the budget of one message (``MAX_META_KEYS`` keys of at
    most ``MAX_KEY_CHARS`` characters): a :class:`ProtocolError` names ``sender``."""
    if not meta:  # (most messages: nothing to check)
        return
    long = None
    for k in meta:  # (a loop, not a generator: a message's few keys, checked per message)
        if len(str(k)) > MAX_KEY_CHARS:
            long = k
            break
    if len(meta) > MAX_META_KEYS or long is not None:
        what = f"a key of {len(str(long))} characters" if long else f"{len(meta)} keys"
        raise ProtocolError(
            f"{sender!r} sent a meta table with {what}; at most {MAX_META_KEYS} keys of "
            f"{MAX_KEY_CHARS} characters are accepted"
        )


def loads(text: str | bytes) -> Any:
    """``json.loads`` of what a peer sent: JSON nested too deeply for the parser (a peer's
    "JSON bomb", a RecursionError in the receiver's thread) is a :class:`json.JSONDecodeError`
    as malformed JSON is, which every reader of peer JSON refuses naming the peer."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", str(text)[:80], 0) from None


def reported_count(msg: Any, key: str, at_most: int | None = None) -> int:
    """``msg.meta[key]`` (``msg`` a :class:`~fedviews.federation.Message`), a count a party
    reports (its test samples, those it got right): a whole number ``>= 0`` (and ``<=
    at_most``); a :class:`ProtocolError` names the sender of anything else (a negative count
    was recorded as a result)."""
    n = msg.number(key)
    if n < 0 or n != int(n) or (at_most is not None and n > at_most):
        limit = "" if at_most is None else f" and at most {at_most}"
        raise ProtocolError(
            f"{msg.sender!r} sent {key} = {n!r}, expected a whole number >= 0{limit}",
            party=msg.sender,
        )
    return int(n)


def reported_share(msg: Any, key: str) -> float:
    """``msg.meta[key]``, a share a party reports (an accuracy): in ``[0, 1]``; a
    :class:`ProtocolError` names the sender of anything else."""
    x = msg.number(key)
    if not 0.0 <= x <= 1.0:
        raise ProtocolError(
            f"{msg.sender!r} sent {key} = {x!r}, expected a share in [0, 1]", party=msg.sender
        )
    return x


def run_differences(mine: str, theirs: object) -> str:
    """What differs between the run identity a process sent in its hello (``theirs``) and
    the receiver's own (``mine``): ``"params.lr, seed"``, or ``""`` where they are equal.

    An identity is ``key=hash`` pairs joined by ``;`` (``deploy._roles.run_hello``: the
    algorithm, seed, roster, each of ``params``, the defense), so that a refusal names the
    config keys to look at; one that is not such a string (a peer of another version, or a
    dishonest one) differs in ``"its run identity"``. No identity of its own (``mine`` empty):
    nothing to compare, ``""``."""
    if not mine or theirs == mine:
        return ""

    def parts(text: object) -> dict[str, str]:
        if not isinstance(text, str) or len(text) > 64 * 1024:
            return {}
        return dict(p.partition("=")[::2] for p in text.split(";") if "=" in p)

    a, b = parts(mine), parts(theirs)
    if not b:
        return "its run identity"
    differ = sorted(k for k in a if a[k] != b.get(k))
    extra = sorted(b.keys() - a.keys())  # the peer's own keys: a few named, cut short
    differ += [k if len(k) <= 40 else k[:37] + "..." for k in extra[:5]]
    return ", ".join(differ + ([f"{len(extra) - 5} more"] if len(extra) > 5 else []))
