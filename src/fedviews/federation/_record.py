"""What one party received: the attacker's view of a run, for leakage attacks.

A :class:`Recording` attached to a party (:meth:`Party.record`) keeps a decoded copy
of every message delivered *to* that party — the requests its handlers answer and
the replies to what it sent — on any transport, in the party's own process. That
is exactly what an honest-but-curious party (or the coordinator) can look at, so
:mod:`fedviews.privacy.attacks` take a recording and nothing else of the run
(plus auxiliary knowledge they declare). A recording saved with :meth:`save`
and read back with :meth:`Recording.load` needs no party, no data and no run.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data import read_npz, write_npz
from fedviews.errors import ConfigError, DataError
from fedviews.federation._message import Message, MetaValue
from fedviews.federation._tensors import to_host

#: default ceiling on the array bytes one recording keeps in memory
MAX_RECORDED_BYTES = 4 << 30


@dataclass(frozen=True)
class Observed:
    """One message as its receiver saw it (arrays decoded, metadata as sent)."""

    sender: str
    receiver: str
    round: int
    kind: str
    meta: dict[str, MetaValue]
    arrays: dict[str, np.ndarray]

    def message(self) -> Message:
        """The message as it was delivered (e.g. to decode a wire codec's arrays with
        :meth:`~fedviews.federation.Codec.unpack`, as its receiver did)."""
        return Message(self.kind, self.sender, self.receiver, self.round, self.arrays, self.meta)

    def number(self, key: str) -> float:
        """The numeric metadata value ``key`` (a :class:`DataError` if it is not one)."""
        value = self.meta.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DataError(f"{self.kind!r} from {self.sender!r}: meta[{key!r}] = {value!r}")
        return float(value)


@dataclass
class Recording:
    """Every message delivered to ``party`` (of ``role``) in a run of ``algorithm``, in order.

    ``kinds`` keeps only messages of those kinds (a reply's kind is the request's plus
    ``":reply"``), ``rounds`` only those rounds; ``None`` keeps all. A recording that
    would hold more than ``max_bytes`` of arrays raises :class:`ConfigError` rather
    than exhaust memory (record fewer kinds or rounds).
    """

    party: str
    role: str
    algorithm: str = ""
    kinds: frozenset[str] | None = None
    rounds: frozenset[int] | None = None
    max_bytes: int = MAX_RECORDED_BYTES
    messages: list[Observed] = field(default_factory=list)
    nbytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def of(
        cls,
        party: str,
        role: str,
        algorithm: str = "",
        *,
        kinds: Collection[str] | None = None,
        rounds: Collection[int] | None = None,
        max_bytes: int = MAX_RECORDED_BYTES,
    ) -> Recording:
        return cls(
            party,
            role,
            algorithm,
            None if kinds is None else frozenset(kinds),
            None if rounds is None else frozenset(int(r) for r in rounds),
            max_bytes,
        )

    def add(self, msg: Message) -> None:
        """Keep ``msg`` (delivered to this party) if it passes the filters."""
        if msg.receiver != self.party:
            return
        if self.kinds is not None and msg.kind not in self.kinds:
            return
        if self.rounds is not None and msg.round not in self.rounds:
            return
        arrays = {k: np.array(to_host(v), copy=True) for k, v in msg.arrays.items()}
        size = sum(a.nbytes for a in arrays.values())
        with self._lock:  # replies of a broadcast may arrive on several threads
            if self.nbytes + size > self.max_bytes:
                raise ConfigError(
                    f"the recording of {self.party!r} would exceed {self.max_bytes:,} bytes; "
                    "record fewer message kinds or rounds"
                )
            self.nbytes += size
            self.messages.append(
                Observed(msg.sender, msg.receiver, msg.round, msg.kind, dict(msg.meta), arrays)
            )

    def __iter__(self) -> Iterator[Observed]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def select(self, kind: str | None = None, array: str | None = None) -> list[Observed]:
        """The messages of ``kind`` (any if None) that carry ``array`` (any if None), in order."""
        return [
            m
            for m in self.messages
            if (kind is None or m.kind == kind) and (array is None or array in m.arrays)
        ]

    def last_round(self) -> int:
        """The highest round number seen (0 for an empty recording)."""
        return max((m.round for m in self.messages), default=0)

    # -- files -----------------------------------------------------------------
    def save(self, path: Path) -> None:
        """Write the recording to one ``.npz`` (arrays plus a JSON index; no pickles)."""
        index: dict[str, Any] = {
            "party": self.party,
            "role": self.role,
            "algorithm": self.algorithm,
            "messages": [
                {
                    "sender": m.sender,
                    "round": m.round,
                    "kind": m.kind,
                    "meta": m.meta,
                    "arrays": list(m.arrays),
                }
                for m in self.messages
            ],
        }
        arrays = {
            f"{i}/{name}": a for i, m in enumerate(self.messages) for name, a in m.arrays.items()
        }
        raw = np.frombuffer(json.dumps(index).encode(), dtype=np.uint8)
        write_npz(Path(path), {"__index__": raw, **arrays}, compress=False)

    @classmethod
    def load(cls, path: Path) -> Recording:
        """Read a recording written by :meth:`save` (a :class:`DataError` if it is not one)."""
        path = Path(path)
        try:
            got = read_npz(path)
            index = json.loads(bytes(got.pop("__index__")).decode())
            rec = cls(str(index["party"]), str(index["role"]), str(index["algorithm"]))
            for i, m in enumerate(index["messages"]):
                arrays = {name: got[f"{i}/{name}"] for name in m["arrays"]}
                obs = Observed(
                    str(m["sender"]), rec.party, int(m["round"]), str(m["kind"]), m["meta"], arrays
                )
                rec.messages.append(obs)
                rec.nbytes += sum(a.nbytes for a in arrays.values())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{path} is not a fedviews recording: {exc}") from exc
        return rec


@dataclass(frozen=True)
class Observation:
    """Per-sample values an attacker holds about others' private data, taken from its recording.

    An algorithm's :meth:`~fedviews.federation.Algorithm.observations` reads them
    out of a :class:`Recording` with the protocol knowledge the attacker has anyway
    (batch orders from seeds it received, which rows it computed on); attacks in
    :mod:`fedviews.privacy.attacks` take them from there.

    ``kind``: ``"consensus"`` (a matrix close to the one-hot labels), ``"gradient"``
    (per-sample loss gradients w.r.t. the attacker's own outputs), ``"softmax_gradient"``
    (the same, when those outputs are added straight into softmax logits),
    ``"representation"`` (another party's outputs on its private features) or ``"model"``
    (a model the attacker received: ``predict(X, lengths)`` maps the victim's features of
    some rows, once the attacker knows them, to labels — ``lengths``: the valid time steps
    per view of sequences, or ``None``; ``values`` is empty).
    ``values[i]`` belongs to row ``rows[i]`` of alignment group ``group``.
    ``labels_of``/``features_of``: whose labels / private features the values depend on.
    """

    name: str
    kind: str
    group: str
    rows: np.ndarray
    values: np.ndarray
    labels_of: str | None = None
    features_of: str | None = None
    predict: Callable[[np.ndarray, np.ndarray | None], np.ndarray] | None = None
