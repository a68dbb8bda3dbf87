"""The message log and run statistics kept by every transport."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class LogEntry:
    sender: str
    receiver: str
    round: int
    kind: str
    arrays: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    nbytes: int  # bytes on the wire (encoded message)
    meta: tuple[str, ...] = ()  # the keys of its scalar metadata (values are not logged)


#: distinct meta keys the log keeps per pair (more are counted in ``dropped_meta_keys``)
MAX_PAIR_META_KEYS = 4096
#: the entries a log records before it counts them, unread (``MessageLog._fold``)
FOLD_EVERY = 4096
#: the entry objects a log remembers having taken in (``MessageLog._take_in``)
MAX_KNOWN = 1024


@dataclass
class MessageLog:
    """Every message that crossed between parties, in order.

    Recording a message appends its entry to a list (no lock: one ``list.append``); the
    counts, names and entries are brought up to date from it when the log is read (or every
    :data:`FOLD_EVERY` messages), in the order the messages came, so what a reader sees is
    what recording each message at once would have made.

    Its budget: at most ``max_entries`` entries per sender are kept one by one (beyond,
    they only count: ``dropped_entries``), and at most :data:`MAX_PAIR_META_KEYS` distinct
    meta keys per pair (``dropped_meta_keys``), so that a dishonest peer cannot grow the log
    without bound.
    """

    _entries: list[LogEntry] = field(default_factory=list)
    _seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    keep_entries: bool = True
    max_entries: int = 1_000_000
    _bytes_sent: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _bytes_recv: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _messages: int = 0
    _rounds: int = 0
    _crossed: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    _pair_bytes: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    _meta: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    _exchanges: set[tuple[str, str, str, tuple[str, ...]]] = field(default_factory=set)
    _kept: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _dropped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _dropped_keys: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    #: the entries taken in (``_take_in``), by id
    _known: dict[int, LogEntry] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: the entries recorded, not counted yet (:meth:`_fold`)
    _new: list[LogEntry] = field(default_factory=list, repr=False)
    #: the handlers' seconds added, not summed yet (:meth:`_fold`)
    _new_seconds: list[tuple[str, float]] = field(default_factory=list, repr=False)

    @property
    def handler_seconds(self) -> dict[str, float]:
        """The seconds spent in each party's handlers."""
        self._fold()
        return self._seconds

    @property
    def entries(self) -> list[LogEntry]:
        """Every entry kept, in order."""
        self._fold()
        return self._entries

    def add_seconds(self, party: str, seconds: float) -> None:
        """Count ``seconds`` more in ``party``'s handlers (``handler_seconds``, summed in the
        order they came when it is read next: :meth:`_fold`)."""
        new = self._new_seconds
        new.append((party, seconds))  # (atomic: handlers of several threads finish together)
        if len(new) >= FOLD_EVERY:
            self._fold()

    def record(self, entry: LogEntry) -> None:
        """Record ``entry`` (counted, and kept within the budget, when the log is read next:
        :meth:`_fold`)."""
        new = self._new
        new.append(entry)  # (atomic: transports may deliver concurrently)
        if len(new) >= FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        """Count the entries recorded since the last fold (and keep them, within the budget).
        An entry object counted before (:meth:`Header.entry` gives the messages of one header
        and size one) is only counted: its array names, meta keys and exchange are in
        already."""
        new, seconds = self._new, self._new_seconds
        if not new and not seconds:
            return
        with self._lock:  # (lists never replaced: an append while folding stays in them)
            n = len(new)
            for entry in new[:n]:
                self._count(entry)
            del new[:n]
            n = len(seconds)
            summed = self._seconds
            for party, s in seconds[:n]:
                summed[party] += s
            del seconds[:n]

    def _count(self, entry: LogEntry) -> None:
        pair = (entry.sender, entry.receiver)
        self._messages += 1
        if entry.round > self._rounds:
            self._rounds = entry.round
        self._bytes_sent[entry.sender] += entry.nbytes
        self._bytes_recv[entry.receiver] += entry.nbytes
        self._pair_bytes[pair] += entry.nbytes
        if self._known.get(id(entry)) is not entry:
            self._take_in(entry, pair)
        if not self.keep_entries:
            return
        if self._kept[entry.sender] < self.max_entries:
            self._kept[entry.sender] += 1
            self._entries.append(entry)
        else:
            self._dropped[entry.sender] += 1

    def _take_in(self, entry: LogEntry, pair: tuple[str, str]) -> None:
        """Add the array names, meta keys (within the budget) and exchange of ``entry``; it
        is known from then on (at most :data:`MAX_KNOWN` entries at a time), unless the
        budget left out a meta key of it (each of its messages counts that again)."""
        self._crossed[pair].update(entry.arrays)
        keys, dropped = self._meta[pair], False
        for key in entry.meta:
            if key in keys or len(keys) < MAX_PAIR_META_KEYS:
                keys.add(key)
            else:
                self._dropped_keys[pair] += 1
                dropped = True
        names = tuple(entry.arrays) if len(entry.arrays) < 2 else tuple(sorted(entry.arrays))
        self._exchanges.add((*pair, entry.kind, names))
        if not dropped:
            if len(self._known) >= MAX_KNOWN:
                self._known.clear()
            self._known[id(entry)] = entry  # (kept alive here: its id is not reused)

    # -- queries used by tests and reports -------------------------------
    def arrays_sent(self, sender: str | None = None, receiver: str | None = None) -> set[str]:
        """Names of every array that went from ``sender`` to ``receiver`` (None = any)."""
        self._fold()
        out: set[str] = set()
        for (s, r), names in self._crossed.items():
            if (sender is None or s == sender) and (receiver is None or r == receiver):
                out |= names
        return out

    def crossings(self) -> dict[str, list[str]]:
        """``{"sender -> receiver": sorted array names}`` for every pair that exchanged arrays."""
        self._fold()
        return {f"{s} -> {r}": sorted(n) for (s, r), n in sorted(self._crossed.items()) if n}

    def exchanges(self) -> list[tuple[str, str, str, tuple[str, ...]]]:
        """Every distinct ``(sender, receiver, kind, array names)`` that crossed, sorted.

        The protocol's footprint: the same run in one process and deployed must
        produce the same set (up to the deployment's own session messages).
        """
        self._fold()
        return sorted(self._exchanges)

    @property
    def n_messages(self) -> int:
        self._fold()
        return self._messages

    @property
    def rounds(self) -> int:
        self._fold()
        return self._rounds

    @property
    def total_bytes(self) -> int:
        self._fold()
        return int(sum(self._bytes_sent.values()))

    def summary(self) -> dict[str, Any]:
        """Run statistics: rounds, messages, bytes sent/received and handler time per party."""
        self._fold()
        parties = sorted(set(self._bytes_sent) | set(self._bytes_recv) | set(self._seconds))
        out: dict[str, Any] = {
            "rounds": self._rounds,
            "messages": self._messages,
            "total_bytes": self.total_bytes,
            "per_party": {
                p: {
                    "bytes_sent": int(self._bytes_sent.get(p, 0)),
                    "bytes_received": int(self._bytes_recv.get(p, 0)),
                    "wall_seconds": round(float(self._seconds.get(p, 0.0)), 6),
                }
                for p in parties
            },
            "crossings": self.crossings(),
            # bytes on the wire per pair (every message, also those without arrays)
            "crossing_bytes": {
                f"{s} -> {r}": int(n) for (s, r), n in sorted(self._pair_bytes.items())
            },
            # metadata keys per pair (scalars only; a hub sees none of a sealed message)
            "meta_keys": {
                f"{s} -> {r}": sorted(k) for (s, r), k in sorted(self._meta.items()) if k
            },
            "exchanges": [[s, r, k, list(n)] for s, r, k, n in self.exchanges()],
        }
        # what the log's budget left out (only when it left something out)
        if self._dropped:
            out["dropped_entries"] = dict(sorted(self._dropped.items()))
        if self._dropped_keys:
            out["dropped_meta_keys"] = {
                f"{s} -> {r}": n for (s, r), n in self._dropped_keys.items()
            }
        return out

    def to_records(self, limit: int | None = None) -> list[dict[str, Any]]:
        self._fold()
        entries = self._entries if limit is None else self._entries[:limit]
        return [asdict(e) for e in entries]


#: the keys a :meth:`MessageLog.summary` may hold (with ``sessions``, a merged one's)
SUMMARY_KEYS = (
    "rounds",
    "messages",
    "total_bytes",
    "per_party",
    "crossings",
    "crossing_bytes",
    "meta_keys",
    "exchanges",
    "dropped_entries",
    "dropped_meta_keys",
    "sessions",
)


def merge_summaries(before: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, Any]:
    """One :meth:`MessageLog.summary` of a run made in two sessions: ``before`` (what the
    killed session's checkpoint kept, up to the round it resumed from) and ``now`` (the
    resumed session's). Counts and bytes add up, names and exchanges unite, ``rounds`` is the
    last; ``sessions`` counts them (a resumed run's log covered its last session only)."""
    out: dict[str, Any] = dict(now)
    for key in ("messages", "total_bytes"):
        out[key] = int(before.get(key, 0)) + int(now.get(key, 0))
    out["rounds"] = max(int(before.get("rounds", 0)), int(now.get("rounds", 0)))
    per: dict[str, dict[str, Any]] = {}
    for table in (before.get("per_party", {}), now.get("per_party", {})):
        for party, row in table.items():
            mine = per.setdefault(
                party, {"bytes_sent": 0, "bytes_received": 0, "wall_seconds": 0.0}
            )
            for k in mine:
                mine[k] += row.get(k, 0)
    out["per_party"] = {
        p: {**r, "wall_seconds": round(r["wall_seconds"], 6)} for p, r in sorted(per.items())
    }
    for key in ("crossings", "meta_keys"):
        pairs = set(before.get(key, {})) | set(now.get(key, {}))
        out[key] = {
            pair: sorted(
                set(before.get(key, {}).get(pair, [])) | set(now.get(key, {}).get(pair, []))
            )
            for pair in sorted(pairs)
        }
    pairs = set(before.get("crossing_bytes", {})) | set(now.get("crossing_bytes", {}))
    out["crossing_bytes"] = {
        pair: int(before.get("crossing_bytes", {}).get(pair, 0))
        + int(now.get("crossing_bytes", {}).get(pair, 0))
        for pair in sorted(pairs)
    }
    seen = {tuple(map(str, e[:3])) + (tuple(e[3]),) for e in before.get("exchanges", [])}
    seen |= {tuple(map(str, e[:3])) + (tuple(e[3]),) for e in now.get("exchanges", [])}
    out["exchanges"] = [[s, r, k, list(n)] for s, r, k, n in sorted(seen)]
    for key in ("dropped_entries", "dropped_meta_keys"):
        if key in before or key in now:
            names = set(before.get(key, {})) | set(now.get(key, {}))
            out[key] = {
                n: int(before.get(key, {}).get(n, 0)) + int(now.get(key, {}).get(n, 0))
                for n in sorted(names)
            }
    out["sessions"] = int(before.get("sessions", 1)) + 1
    return out
