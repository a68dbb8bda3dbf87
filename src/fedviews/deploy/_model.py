"""A deployed process's part of the fitted model, kept in its run folder for ``fedviews predict``.

At the end of a training run (``deploy:finish``) every process writes ``model.json``
into its own folder: the run's ID (drawn by the coordinator and sent with
``deploy:finish``, so the same in every folder of one run), a fingerprint of the run's
identity (algorithm, seed, roster, params, defense: :func:`~._roles.run_identity`),
the setup every process built its part from, and the SHA-256 of the arrays the
process kept (a party's ``result.npz``; the coordinator keeps none for prediction).
Nothing in it is executed or unpickled: JSON, and arrays read with
``allow_pickle=False``.

``fedviews predict`` loads a process's part with :func:`load_model_part`: a missing
part, a part of another member, of another config, or arrays changed since the
training run are refused, naming the member; the coordinator then refuses a party
whose part is of another run (its run ID differs from the coordinator's own).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import fedviews
from fedviews.data import read_npz
from fedviews.deploy._config import DeployConfig
from fedviews.errors import ConfigError, DataError
from fedviews.federation import run_differences

MODEL_FILE = "model.json"
#: the arrays a party keeps (its results, :meth:`Algorithm.write_party_results`)
ARRAYS_FILE = "result.npz"
FORMAT = "fedviews.model-part/1"


@dataclass(frozen=True)
class ModelPart:
    """One member's part of a fitted deployed model (see the module docstring)."""

    member: str
    run_id: str
    setup: dict[str, Any]
    arrays: dict[str, np.ndarray]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _identity(cfg: DeployConfig) -> str:
    from fedviews.deploy._roles import run_fingerprint

    return run_fingerprint(cfg)


def _keys(cfg: DeployConfig) -> str:
    """The run identity key by key (:func:`~._roles.run_hello`), to name what differs."""
    from fedviews.deploy._roles import run_hello

    return run_hello(cfg)


def save_model_part(
    out_dir: Path, cfg: DeployConfig, member: str, run_id: str, setup: dict[str, Any]
) -> Path:
    """Write ``out_dir/model.json`` for ``member`` of the run ``run_id`` (after its arrays,
    ``result.npz``, where it keeps some)."""
    arrays = out_dir / ARRAYS_FILE
    meta = {
        "format": FORMAT,
        "fedviews": fedviews.__version__,
        "algorithm": cfg.algorithm,
        "member": member,
        "run_id": run_id,
        "run": _identity(cfg),
        "run_keys": _keys(cfg),
        "setup": setup,
        "arrays": {ARRAYS_FILE: _digest(arrays)} if arrays.is_file() else {},
    }
    path = out_dir / MODEL_FILE
    path.write_text(json.dumps(meta, indent=2))
    return path


def load_model_part(directory: Path, cfg: DeployConfig, member: str) -> ModelPart:
    """``member``'s model part in ``directory`` (its folder of a finished training run of
    ``cfg``); a :class:`DataError` or :class:`ConfigError` naming ``member`` otherwise."""
    path = Path(directory) / MODEL_FILE
    where = f"the model part of {member!r} ({path})"
    if not path.is_file():
        raise DataError(
            f"{member!r} has no model part: {path} does not exist; pass its folder of a "
            "finished training run (`fedviews launch`, or its own --out)"
        )
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{where} is not readable: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DataError(f"{where} is not a fedviews model part ({FORMAT})")
    if meta.get("member") != member:
        raise DataError(f"{where} is the part of {meta.get('member')!r}")
    if meta.get("algorithm") != cfg.algorithm or meta.get("run") != _identity(cfg):
        differ = run_differences(_keys(cfg), meta["run_keys"]) if "run_keys" in meta else ""
        raise ConfigError(
            f"{where} was trained with another config ({meta.get('algorithm')}; "
            + (
                f"different: {differ}"
                if differ
                else "algorithm, seed, parties, params or defense differ"
            )
            + "): predict with its training config and overrides"
        )
    arrays: dict[str, np.ndarray] = {}
    for name, digest in dict(meta.get("arrays") or {}).items():
        file = path.parent / str(name)
        if name != ARRAYS_FILE or not file.is_file() or _digest(file) != digest:
            raise DataError(f"{where}: {file} is missing or not the one its training run wrote")
        arrays = read_npz(file)
    return ModelPart(member, str(meta.get("run_id")), dict(meta.get("setup") or {}), arrays)
