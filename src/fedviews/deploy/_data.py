"""One data file per party: its sample IDs, its features and (label owners) its labels.

Formats
-------
``.npz``: arrays ``ids`` (n,), ``X`` (n, ...) and optionally ``y`` (n,); a party
that holds no features (a pure label owner of Multi-VFL) may omit ``X``. An
optional held-out split has the same names with the suffix ``_test``
(``ids_test``, ``X_test``, ``y_test``). ``X`` may have any number of trailing
dimensions (image strips ``(n, rows, width)``, sequences ``(n, T, d)``);
``uint8`` and ``float32`` arrays keep their type, other numbers become ``float64``.
A party that holds several views (a horizontal FedMV client: all views of its own
samples) stores them side by side along the last axis of ``X`` and lists their
widths in the optional integer array ``view_dims`` (e.g. ``[240, 76, 216]`` for
``X`` of shape ``(n, 532)``, or ``[3, 3]`` for sequences ``(n, T, 6)``); without it
``X`` is one view. Variable-length sequences are padded to one ``T`` and list their
valid steps per sample and view in ``lengths`` ``(n, K)`` (``lengths_test``).
``.csv`` (a header row) or ``.parquet`` (needs ``pip install 'fedviews[parquet]'``):
column ``id`` holds the sample IDs, an optional column ``label`` the labels, an optional
column ``group`` the row's alignment group, every other column is a numeric feature
(2-D only, no test split).

``group`` (an ``.npz`` array of text, or the column): for a party in several alignment
groups (a Multi-VFL data owner with several label owners), the group of every training
row, named as the algorithm names its groups (Multi-VFL: after the label owner); the party
offers each group only its rows (:meth:`fedviews.data.PartyData.offered`). Files aligned
outside the run (``federation.alignment = "none"``) need it there.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data import PartyData, deal_views, read_npz
from fedviews.errors import DataError, FedViewsError, require

#: the data file types a party can hold (``.parquet`` needs the ``parquet`` extra)
SUFFIXES = ("npz", "csv", "parquet")
_TYPES = ", ".join("." + s for s in SUFFIXES)


def party_files(
    parties: Iterable[str], data_dir: Path, error: type[FedViewsError]
) -> dict[str, Path]:
    """Each party's data file ``DATA_DIR/<party>.npz``, ``.csv`` or ``.parquet`` (else
    ``error``: a launcher says which kind of mistake a missing file is)."""
    files = {}
    for p in parties:
        found = [data_dir / f"{p}.{ext}" for ext in SUFFIXES if (data_dir / f"{p}.{ext}").is_file()]
        if not found:
            raise error(f"no data file {data_dir / p}.npz, .csv or .parquet for party {p!r}")
        if len(found) > 1:  # (the first was taken without a word: a stale file trained)
            names = " and ".join(f.name for f in found)
            raise error(f"{data_dir} holds {names} for party {p!r}: keep the one to use")
        files[p] = found[0]
    return files


def load_party_data(path: str | Path) -> PartyData:
    """Read a party's ``.npz`` or ``.csv`` data file (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"data file {p} does not exist")
    if p.suffix == ".npz":
        try:
            got: dict[str, Any] = read_npz(p)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DataError(f"{p}: not a readable .npz data file ({exc})") from None
        if "ids" not in got:
            raise DataError(f"{p} lacks the array 'ids' (needs ids[, X, y, ids_test, ...])")
        if not len(got["ids"]):
            raise DataError(f"{p}: its ids are empty (a party file holds its rows)")
        known = {"ids", "X", "y", "ids_test", "X_test", "y_test", "view_dims"}
        known |= {"lengths", "lengths_test", "group"}
        extra = set(got) - known
        if extra:
            raise DataError(f"{p}: unknown arrays {sorted(extra)}; expected {sorted(known)}")
        return _party(p, **got)
    if p.suffix == ".csv":
        try:
            with p.open(newline="", encoding="utf-8-sig") as fh:  # -sig: a BOM is no header
                rows = [(line, r) for line, r in enumerate(csv.reader(fh), start=1) if r]
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start}): save it as a UTF-8 "
                "CSV (Excel: 'CSV UTF-8')"
            ) from None
        if not rows:
            raise DataError(f"{p}: the file is empty (a header with an `id` column, then rows)")
        head = rows[0][1]
        if "id" not in head:
            hint = (
                " (is it delimited by another character than a comma?)"
                if len(head) == 1
                else " (names are case- and space-sensitive)"
                if any(h.strip().lower() == "id" for h in head)
                else ""
            )
            raise DataError(
                f"{p}: the header must contain an `id` column; it reads {head[:8]}{hint}"
            )
        _check_names(p, head)
        for line, r in rows[1:]:
            if len(r) != len(head):
                raise DataError(f"{p}: line {line} has {len(r)} fields, the header {len(head)}")
        body = [r for _, r in rows[1:]]
        if not body:
            raise DataError(f"{p}: the file has a header but no data rows")
        i_id = head.index("id")
        i_y = head.index("label") if "label" in head else None
        i_g = head.index("group") if "group" in head else None
        feats = [j for j in range(len(head)) if j not in (i_id, i_y, i_g)]
        raw_ids = [r[i_id] for r in body]
        blank = next((line for line, r in rows[1:] if not r[i_id].strip()), None)
        if blank is not None:  # (it would also make every other ID of the file a string)
            raise DataError(f"{p}: line {blank} has an empty id; every row needs an ID")
        ids = np.array([int(v) for v in raw_ids]) if _integers(raw_ids) else np.array(raw_ids)
        X = np.empty((len(body), len(feats)))
        for (line, r), out in zip(rows[1:], X, strict=True):
            try:
                out[:] = [float(r[j]) for j in feats]
            except ValueError:
                j = next(j for j in feats if not _parses(float, r[j]))
                raise DataError(
                    f"{p}: line {line}, column {head[j]!r}: {r[j]!r} is not a number"
                ) from None
        y = None
        try:
            if i_y is not None:
                y = np.array([_label(r[i_y]) for r in body])
        except ValueError as exc:
            assert i_y is not None
            line = next(line for line, r in rows[1:] if not _parses(_label, r[i_y]))
            raise DataError(
                f"{p}: line {line}: {exc}: a .csv's label column holds class indices; text "
                "class names, or a real-valued target (regression), go in a .npz or .parquet "
                "file"
            ) from None
        group = None if i_g is None else np.array([r[i_g] for r in body])
        return _party(p, ids=ids, X=X, y=y, group=group)
    if p.suffix == ".parquet":
        return _load_parquet(p)
    raise DataError(f"{p}: unsupported data file type {p.suffix!r}; use {_TYPES}")


def _party(p: Path, **fields: Any) -> PartyData:
    """``PartyData(**fields)`` read from the file ``p``: a DataError names the file."""
    try:
        return PartyData(**fields)
    except DataError as exc:
        raise DataError(f"{p}: {exc}") from None


def _check_names(p: Path, names: list[str]) -> None:
    """A table's column names, each once and none empty: pandas' ``to_csv`` writes its row
    index as a first column of no name (and Parquet as ``__index_level_0__``), which became
    a feature without a word, as did a second ``id``."""
    empty = [k + 1 for k, n in enumerate(names) if not n.strip()]
    index = [n for n in names if n.startswith("__index_level_")]
    twice = sorted({n for n in names if names.count(n) > 1})
    if empty or index or twice:
        why = (
            f"column {empty[0]} has no name ("
            + (
                "a row index? pandas: to_csv(index=False))"
                if empty[0] == 1
                else "a trailing comma?)"
            )
            if empty
            else f"column {index[0]!r} is a row index (pandas: to_parquet(index=False))"
            if index
            else f"columns named twice: {twice[:5]}"
        )
        raise DataError(f"{p}: {why}")


def _parses(convert: Callable[[str], Any], v: str) -> bool:
    """Whether ``convert(v)`` succeeds (which cell of a failed row is the culprit)."""
    try:
        convert(v)
    except ValueError:
        return False
    return True


def _integers(values: list[str]) -> bool:
    """Whether every ID is an int64 written as Python writes it (``"007"`` stays a string)."""
    try:
        return all(str(int(v)) == v and abs(int(v)) < 2**63 for v in values)
    except ValueError:
        return False


def _label(v: str) -> int:
    """A class index written as ``3`` or ``3.0`` (what a float label column becomes)."""
    try:
        f = float(v)
    except ValueError:
        f = math.nan
    if not f.is_integer():
        raise ValueError(f"label {v!r} is not a class index (an integer)")
    return int(f)


def _load_parquet(p: Path) -> PartyData:
    """Columns ``id``, optional ``label``, every other column a numeric feature."""
    pq: Any = require("pyarrow.parquet", "parquet")
    try:
        table = pq.read_table(p)
    except Exception as exc:  # pyarrow raises its own types for unreadable files
        raise DataError(f"{p}: not a readable Parquet file ({exc})") from None
    names = list(table.column_names)
    if "id" not in names:
        raise DataError(f"{p}: the table needs an `id` column (has {names[:8]})")
    _check_names(p, names)
    if not table.num_rows:
        raise DataError(f"{p}: the table has no rows")
    for name in names:
        if table.column(name).null_count:
            raise DataError(f"{p}: column {name!r} has missing values")
    ids = np.asarray(table.column("id").to_numpy(zero_copy_only=False))
    if ids.dtype == object:
        ids = ids.astype(str)
    y = (
        np.asarray(table.column("label").to_numpy(zero_copy_only=False))
        if "label" in names
        else None
    )
    group = (
        np.asarray(table.column("group").to_numpy(zero_copy_only=False))
        if "group" in names
        else None
    )
    feats = [n for n in names if n not in ("id", "label", "group")]
    cols = [np.asarray(table.column(n).to_numpy(zero_copy_only=False)) for n in feats]
    bad = [n for n, c in zip(feats, cols, strict=True) if not np.issubdtype(c.dtype, np.number)]
    if bad:
        raise DataError(f"{p}: non-numeric feature columns {bad[:5]}")
    X = np.column_stack(cols).astype(np.float64) if cols else np.empty((len(ids), 0))
    return _party(p, ids=ids, X=X, y=y, group=group)


def save_party_data(path: str | Path, data: PartyData) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".npz":
        arrays: dict[str, Any] = data.arrays()
        np.savez(p, **arrays)
    elif p.suffix == ".csv":
        _check_tabular(p, data)
        if data.y is not None and not _integral_labels(data.y):
            raise DataError(
                f"{p}: a .csv holds integer class labels, these are {data.y.dtype}; use .npz "
                "or .parquet"
            )
        with p.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(
                [
                    "id",
                    *(["label"] if data.y is not None else []),
                    *(["group"] if data.group is not None else []),
                    *[f"f{j}" for j in range(data.features.shape[1])],
                ]
            )
            for i in range(len(data.ids)):
                lab = [int(data.y[i])] if data.y is not None else []
                tag = [data.group[i]] if data.group is not None else []
                w.writerow([data.ids[i], *lab, *tag, *[repr(float(v)) for v in data.features[i]]])
    elif p.suffix == ".parquet":
        _check_tabular(p, data)
        pa: Any = require("pyarrow", "parquet")
        pq: Any = require("pyarrow.parquet", "parquet")
        cols: dict[str, Any] = {"id": data.ids}
        if data.y is not None:
            cols["label"] = data.y
        if data.group is not None:
            cols["group"] = data.group
        cols.update({f"f{j}": data.features[:, j] for j in range(data.features.shape[1])})
        pq.write_table(pa.table(cols), p)
    else:
        raise DataError(f"{p}: unsupported data file type {p.suffix!r}; use {_TYPES}")
    return p


def _integral_labels(y: np.ndarray) -> bool:
    if y.dtype.kind in "iub":
        return True
    return y.dtype.kind == "f" and bool(np.all(y == np.trunc(y)))


def _check_tabular(p: Path, data: PartyData) -> None:
    if data.features.ndim != 2 or data.ids_test is not None or data.view_dims is not None:
        raise DataError(
            f"{p}: a table holds one 2-D view without a test split (no view_dims); use .npz"
        )


def split_dataset(
    dataset: str,
    out_dir: str | Path,
    *,
    views: tuple[str, ...] = (),
    label_owner: str = "",
    n_per_class: int = 0,
    overlap: float = 1.0,
    fmt: str = "npz",
    seed: int = 0,
) -> dict[str, Path]:
    """Write one file per view of a built-in dataset (:func:`fedviews.data.deal_views`)."""
    dealt = deal_views(
        dataset,
        views=views,
        label_owner=label_owner,
        n_per_class=n_per_class,
        overlap=overlap,
        seed=seed,
    )
    return save_all(dealt, out_dir, fmt)


def save_all(datas: dict[str, PartyData], out_dir: str | Path, fmt: str = "npz") -> dict[str, Path]:
    """Write ``datas[party]`` to ``out_dir/<party>.<fmt>`` for every party."""
    return {p: save_party_data(Path(out_dir) / f"{p}.{fmt}", d) for p, d in datas.items()}


#: a PartyData's arrays with one row per training sample, besides its IDs
_ROW_ARRAYS = ("X", "y", "lengths")


def write_demo_data(cfg: Any, out_dir: str | Path, *, aligned: bool = False) -> dict[str, Path]:
    """One file per party of a deployment config, dealt by its algorithm from ``[data]``.

    ``aligned``: the files of a run without the PSI (``alignment = "none"``, as on Flower).
    Every alignment group of the training split keeps the samples all its members hold, in
    the order of the member that holds fewest; a party keeps the rows of its groups, and
    where it is in several (a Multi-VFL data owner with several label owners) tags each row
    with its group (:attr:`~fedviews.data.PartyData.group`). A DataError if a group's members
    share no sample, or two of a party's groups share one (a row has one group).
    """
    from fedviews.federation import get_algorithm_spec

    spec = get_algorithm_spec(cfg.algorithm)
    datas = spec.demo_data(cfg)
    if aligned:
        groups = [g for g in spec.groups(cfg) if g.split == "train"]
        keep: dict[str, list[tuple[str, list[Any]]]] = {p: [] for p in datas}
        for g in groups:
            held = set.intersection(*(set(datas[p].ids.tolist()) for p in g.parties))
            fewest = min((datas[p].ids for p in g.parties), key=len)
            common = [v for v in fewest.tolist() if v in held]
            if not common:
                raise DataError(f"the demo files of {sorted(g.parties)} share no sample ID")
            for p in g.parties:
                keep[p].append((g.name, common))
        for p, d in datas.items():
            if not keep[p]:
                continue
            ids = [v for _, common in keep[p] for v in common]
            if len(set(ids)) != len(ids):
                raise DataError(f"{p!r} holds samples of two alignment groups: a row has one")
            rows = {v: i for i, v in enumerate(d.ids.tolist())}
            idx = np.array([rows[v] for v in ids])
            cut = {k: None if (a := getattr(d, k)) is None else a[idx] for k in _ROW_ARRAYS}
            if len(keep[p]) > 1:
                cut["group"] = np.array([g for g, common in keep[p] for _ in common])
            datas[p] = dataclasses.replace(d, ids=d.ids[idx], **cut)  # the test split kept
    return save_all(datas, out_dir, cfg.data.format)
