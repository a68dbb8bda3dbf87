"""``fedviews datasets list|info|fetch``: the built-in datasets (tables, sequences) and the
CIFAR images that APFed reads from a user's copy."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from fedviews._console import console, err_console, friendly
from fedviews._tables import closest
from fedviews.errors import ConfigError, DataError, FedViewsError

datasets_app = typer.Typer(
    help="List, describe and fetch the built-in datasets.", no_args_is_help=True
)


@datasets_app.command("list")
@friendly
def datasets_list() -> None:
    """List the datasets: tables and sequences (fetchable, but Caltech7: your copy) and the
    CIFAR images APFed reads from your copy."""
    from rich.table import Table

    from fedviews.data import info, list_datasets, list_sequence_datasets

    t = Table(
        "name",
        "kind",
        "available",
        "description",
        title="datasets",
        caption="fetch: fedviews datasets fetch NAME ...; load: fedviews.data.load (tables), "
        "fedviews.data.load_sequences (sequences)",
    )
    from fedviews.data import CIFAR_INFO

    kinds = {
        "table": list_datasets(),
        "sequences": list_sequence_datasets(),
        "images": list(CIFAR_INFO),
    }
    for kind, names in kinds.items():
        for name in names:
            meta = info(name)
            available = "yes" if meta["available"] else "no"
            available = "your copy" if kind == "images" else available
            t.add_row(name, kind, available, str(meta["description"]))
    console.print(t)


@datasets_app.command("info")
@friendly
def datasets_info(name: str) -> None:
    """Describe one dataset (size, views, source, cache location)."""
    from fedviews.data import info

    for key, value in info(name).items():
        console.print(f"[bold]{key}[/]: {value}", highlight=False)


@datasets_app.command("fetch")
@friendly
def datasets_fetch(
    names: Annotated[
        list[str], typer.Argument(help="Datasets to fetch, e.g. handwritten mnist watch.")
    ],
) -> None:
    """Download/convert datasets into the cache (~/.cache/fedviews or $FEDVIEWS_DATA).

    Every name is tried; those that fail are named at the end (exit status 2).
    """
    from fedviews.data import CIFAR_INFO, list_datasets, list_sequence_datasets

    known = list_datasets() + list_sequence_datasets() + list(CIFAR_INFO)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"unknown dataset {unknown[0]!r}{closest(unknown[0], known, 'datasets')}")
    failed = []
    for name in names:
        try:
            console.print(_fetch_one(name), highlight=False, soft_wrap=True)
        except FedViewsError as exc:
            err_console.print(
                f"error: {name}: {type(exc).__name__}: {escape(str(exc))}",
                highlight=False,
                soft_wrap=True,
            )
            failed.append(name)
    if failed:
        err_console.print(f"error: not fetched: {', '.join(failed)}", highlight=False)
        raise typer.Exit(2)


def _fetch_one(name: str) -> str:
    """Fetch the dataset ``name`` (table or sequences) and load it once: a line saying what
    is in the cache."""
    from fedviews.data import (
        CIFAR_HINT,
        CIFAR_INFO,
        fetch,
        fetch_sequences,
        list_sequence_datasets,
        load,
        load_sequences,
    )

    if name in CIFAR_INFO:
        raise DataError(f"{name} cannot be fetched by fedviews: {CIFAR_HINT}")
    if name in list_sequence_datasets():
        path = fetch_sequences(name)
        seqs = load_sequences(name)
        views = dict(zip(seqs.view_names, seqs.n_channels, strict=True))
        return f"{name}: {seqs.n_samples} sequences, views {views} (channels) -> {path}"
    path = fetch(name)
    ds = load(name)
    views = dict(zip(ds.view_names, ds.n_features, strict=True))
    return f"{name}: {ds.n_samples} samples, views {views} -> {path}"
