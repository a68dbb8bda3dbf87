"""Round checkpoints of a deployed run: one ``.npz`` per round, written atomically.

Every process keeps its own checkpoints in ``<its run folder>/checkpoints/``:
the coordinator its server state, each party its *private* state (it never
leaves the party). A file is written to ``round-NNNNN.npz.tmp``, flushed to disk
and renamed, so a process killed at any moment leaves either the previous or the
new checkpoint, never a torn one. Arrays only: loaded with ``allow_pickle=False``.

A party writes ``r`` before it answers round ``r``; the coordinator writes ``r``
after all answers of round ``r``, before round ``r + 1`` starts. So when the
coordinator's last checkpoint is ``R`` every party has ``R`` (maybe ``R + 1``);
everyone keeps two rounds, and a resumed run starts after the last round that
*all* processes have (the parties report theirs in ``deploy:setup``).

The file is flushed to disk (``fsync``) before the rename; the rename itself is
not synced (it would double the cost): after a *host* crash a process may come
back with its previous round, and the run then resumes from an earlier round that
all processes have.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data import read_npz
from fedviews.errors import ConfigError, DataError

_NAME = re.compile(r"round-(\d+)\.npz")
_FINGERPRINT = "checkpoint_fingerprint"
#: the process's message-log summary up to the checkpoint's round (JSON text), so that the
#: message log of a resumed run covers its killed session too (it covered the last one only)
_LOG = "message_log_summary"


def with_log(arrays: Mapping[str, np.ndarray], summary: Mapping[str, Any]) -> dict[str, Any]:
    """``arrays`` and the message-log ``summary`` to keep with them in a checkpoint."""
    return {**arrays, _LOG: np.array(json.dumps(summary))}


def split_log(state: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A loaded checkpoint's arrays without its message-log summary, and that summary
    (``{}`` in a checkpoint written before they kept one)."""
    arrays = dict(state)
    text = arrays.pop(_LOG, None)
    if text is None:
        return arrays, {}
    try:
        summary = json.loads(str(text))
    except ValueError:
        raise DataError(
            "a checkpoint's message log is not JSON: restore it, or start anew"
        ) from None
    return arrays, summary if isinstance(summary, dict) else {}


def _plain(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    return str(obj)


def fingerprint(**parts: Any) -> str:
    """A short hash of everything a resumed run must share with the killed one."""
    blob = json.dumps(parts, sort_keys=True, default=_plain).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class Checkpoints:
    """The round checkpoints in ``directory`` (``keep`` most recent rounds are kept).

    Parameters
    ----------
    directory : Path
        Folder of ``round-NNNNN.npz`` files (created on the first save).
    fingerprint : str
        Stored in every file and checked on load: a checkpoint of a run with another
        config or other data is refused.
    keep : int
        How many checkpoints to keep; older files (and newer ones, left over from a
        killed run that this one has rewound) are deleted after each save.
    """

    def __init__(self, directory: Path, fingerprint: str, keep: int = 2) -> None:
        self.directory, self.fingerprint, self.keep = Path(directory), fingerprint, keep

    def path(self, round: int) -> Path:
        return self.directory / f"round-{round:05d}.npz"

    def rounds(self) -> list[int]:
        """The rounds that have a checkpoint, ascending."""
        if not self.directory.is_dir():
            return []
        found = (_NAME.fullmatch(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def save(self, round: int, arrays: Mapping[str, np.ndarray]) -> Path:
        """Write round ``round`` atomically; keep it and the ``keep - 1`` rounds before it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.path(round)
        tmp = final.with_name(final.name + ".tmp")
        with open(tmp, "wb") as fh:
            payload: dict[str, Any] = {**arrays, _FINGERPRINT: np.array(self.fingerprint)}
            np.savez(fh, **payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        rounds = self.rounds()
        older = [r for r in rounds if r <= round]
        for r in [r for r in rounds if r > round] + older[: -self.keep]:
            self.path(r).unlink(missing_ok=True)
        return final

    def load(self, round: int) -> dict[str, np.ndarray]:
        """The arrays of round ``round``; raise if it is missing or from another run."""
        path = self.path(round)
        if not path.is_file():
            have = self.rounds()
            raise DataError(
                f"no checkpoint of round {round} in {self.directory} "
                f"(it has {have or 'none'}); resume from the run folder of the killed run"
            )
        try:
            arrays = read_npz(path)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DataError(
                f"{path} is not a readable checkpoint ({type(exc).__name__}: {exc}); restore "
                "it from a backup, or start the run anew"
            ) from None
        saved = str(arrays.pop(_FINGERPRINT, ""))
        if saved != self.fingerprint:
            raise ConfigError(
                f"{path} was written by a run with another config or other data "
                f"(fingerprint {saved} != {self.fingerprint}); resume with the same config, "
                "overrides and data files"
            )
        return arrays

    def written_by_this_run(self) -> tuple[list[int], list[int]]:
        """The checkpointed rounds that carry this run's fingerprint, and those that carry
        another (a changed data file or config since they were written; an unreadable file
        counts as another's). Reads only each file's fingerprint entry."""
        ours: list[int] = []
        other: list[int] = []
        for r in self.rounds():
            try:
                with np.load(self.path(r), allow_pickle=False) as npz:
                    saved = str(npz[_FINGERPRINT]) if _FINGERPRINT in npz.files else ""
            except (OSError, ValueError, EOFError, zipfile.BadZipFile):
                saved = ""
            (ours if saved == self.fingerprint else other).append(r)
        return ours, other

    def latest(self) -> int:
        """The last round with a checkpoint (0 if none)."""
        rounds = self.rounds()
        return rounds[-1] if rounds else 0
