"""The base of the horizontal specs (H-FedMV, S-FedMV): every party a client with its own
labelled samples, all views side by side in one ``X``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from fedviews.data import PartyData
from fedviews.errors import ConfigError, DataError
from fedviews.federation import Algorithm, AlignGroup, Local, Roster, RunSpec


class HorizontalClients(Algorithm):
    """Horizontal federations (H-FedMV, S-FedMV): every party a client with its own
    labelled samples, all views side by side in one ``X`` (``view_dims``), labels as
    class indices ``0..C-1``; each client aligns only its own IDs."""

    client_ndim: ClassVar[int] = 2  # of X: (n, d) features or (n, T, d) sequences
    secure_sum_of = "clients"

    def role(self, run: RunSpec, party: str) -> str:
        return "client"

    def check_federation(self, fed: Roster) -> None:
        if set(fed.label_owners) != set(fed.parties):
            raise ConfigError(
                f"{self.name}: every client holds the labels of its own samples; set "
                f"federation.label_owners = federation.parties ({list(fed.parties)})"
            )

    def groups(self, run: RunSpec) -> list[AlignGroup]:
        """One alignment group per client (its own IDs), and one per client's test split."""
        out = [AlignGroup(c, (c,)) for c in run.federation.parties]
        if run.params.evaluate:
            out += [AlignGroup(f"{c}:test", (c,), "test") for c in run.federation.parties]
        return out

    def check_data(self, run: RunSpec, party: str, data: PartyData) -> None:
        super().check_data(run, party, data)
        X = data.features
        if X.ndim != self.client_ndim or X.shape[-1] == 0:
            shape = "(n, d_1 + ... + d_K)" if self.client_ndim == 2 else "(n, T, c_1 + ... + c_K)"
            raise DataError(f"client {party!r} must hold X of shape {shape}, got {X.shape}")
        for what, y in (("y", data.y), ("y_test", data.y_test)):
            if y is not None and (not np.issubdtype(y.dtype, np.integer) or (y < 0).any()):
                raise DataError(
                    f"client {party!r}: {what} must hold class indices 0..C-1 (integers)"
                )
        if run.params.evaluate and (data.X_test is None or data.y_test is None):
            raise DataError(
                f"client {party!r}: its file needs ids_test, X_test and y_test "
                "(or set params.evaluate = false)"
            )

    def party_info(self, run: RunSpec, party: str, local: Local) -> dict[str, Any]:
        data = local.data
        assert data.y is not None
        dims = data.view_dims or (data.features.shape[-1],)
        return {"n_classes": int(np.max(data.y)) + 1, "view_dims": ",".join(map(str, dims))}

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The agreed label set (``0..C-1``) and view layout, checked to be the same everywhere."""
        layouts = {p: str(infos[p]["view_dims"]) for p in run.federation.parties}
        if len(set(layouts.values())) != 1:
            raise DataError(
                f"the clients' views differ (view_dims per client: {layouts}); every client must "
                "hold every view with the same features"
            )
        n_classes = max(int(infos[p]["n_classes"]) for p in run.federation.parties)
        if n_classes < 2:
            raise DataError("the clients' labels contain fewer than two classes")
        return {"n_classes": n_classes, "view_dims": next(iter(layouts.values()))}


def view_dims_of(setup: Mapping[str, Any]) -> list[int]:
    """The widths of the views, agreed at setup."""
    return [int(d) for d in str(setup["view_dims"]).split(",")]
