"""FedMV deployed: V-FedMV (``vfedmv``) and H-FedMV (``hfedmv``), one process per party.

V-FedMV (vertical, Algorithm 2)
-------------------------------
Every party holds one view of the same samples (``X`` 2-D); ``federation.label_owner``
(one of them) also holds the labels. Alignment: one PSI of all parties on the
training IDs and, with ``params.evaluate``, one on the test IDs (split ``"test"``).
The coordinator process is the V-FedMV server. The paper's server holds ``Y``
("shared by all L_k and the server", Algorithm 2): in a deployment the label
owner sends the one-hot ``Y`` of the aligned samples to the coordinator once,
before round 1 (array ``Y``, allowed only from the role ``label_owner``). Then
the algorithm runs unchanged: ``Z_k`` party → coordinator, ``Z`` coordinator →
party. Testing phase (``params.evaluate``): every party computes
``P_k = X_k^test W_k`` locally and the consensus of Eqs. (12)-(13) exchanges
``Z_k_test`` / ``Z_test``; the coordinator then sends the final ``Z_test`` to
the label owner, which scores it against its own test labels and reports only
the accuracy (test labels never leave it). Each party standardises its view
with its own training statistics (``params.standardize``).

H-FedMV (horizontal, Algorithm 3)
---------------------------------
Every party is a client holding *all* views and the labels of its *own* samples:
list every client in ``federation.label_owners``. A client's file stores its
views side by side in ``X`` (``(n, d_1 + ... + d_K)``) with their widths in
``view_dims`` (see :class:`~fedviews.deploy.PartyData`), labels as class indices
``0..C-1`` (``C`` = the largest label of any client + 1, the agreed label set),
and optionally its own test samples (``ids_test``, ``X_test``, ``y_test``).
Alignment: clients hold *different* samples, so there is nothing to intersect
across clients; every client is its own alignment group (a one-party PSI, which
reveals only its sample count and fixes the row order: ascending ID). Only
``W_k`` (coordinator → client) and ``W_local_k`` (client → coordinator) cross.
Standardisation (``params.standardize``): ``"pooled"`` (default, the protocol of
the FedMV experiments) with the pooled training mean and standard deviation,
obtained before round 1 as one more sample-weighted aggregate: every client
sends its per-feature sums ``x_sum`` and centred sums of squares ``x_m2`` (these
reveal the client's feature means and variances to the coordinator) and gets
``x_mean``, ``x_scale`` back; ``"local"``: every client with its own statistics
(nothing extra crosses); ``"none"``. After the last round the coordinator sends
the global ``W_k`` to every client, which keeps the model and (``params.evaluate``)
predicts its own test samples locally (Eqs. 18-19); only its counts of test
samples and correct predictions reach the coordinator.

Checkpoints at round boundaries (``--resume``) use the ``state_dict`` /
``load_state`` of the FedMV party and server classes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fedviews.data import PartyData, held_out_split
from fedviews.errors import ConfigError, DataError, ProtocolError
from fedviews.federation import (
    Algorithm,
    AlignGroup,
    Coordinator,
    Local,
    Message,
    Party,
    PrivacyPolicy,
    Roster,
    RunSpec,
    handles,
    register_algorithm_spec,
)

if TYPE_CHECKING:
    from fedviews.linear._fedmv import HFedMVClient, HFedMVServer

__all__ = ["HFedMVDeployParams", "hfedmv_demo_data"]

STANDARDIZE = ("pooled", "local", "none")
#: the most views a horizontal client may hold (the privacy policy names ``W_0 .. W_15``)
MAX_VIEWS = 16


def _scaler(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of the columns (constant columns: scale 1)."""
    mu, sd = X.mean(axis=0), X.std(axis=0)
    sd[sd < 1e-12] = 1.0
    return mu, sd


def _positive(p: Any, *names: str) -> None:
    for name in names:
        if not getattr(p, name) > 0:
            raise ConfigError(f"params.{name} must be > 0")


def _at_least_one(p: Any, *names: str) -> None:
    for name in names:
        v = getattr(p, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"params.{name} must be an integer >= 1")


def _as_coordinator(
    pol: PrivacyPolicy, extra: Mapping[tuple[str, str], Sequence[str]]
) -> PrivacyPolicy:
    """``pol`` with the role ``server`` renamed ``coordinator`` (its role on the wire), plus ``extra``."""
    rename = {"server": "coordinator"}
    rules: dict[tuple[str, str], set[str]] = {}
    for (a, b), names in pol.allowed.items():
        rules.setdefault((rename.get(a, a), rename.get(b, b)), set()).update(names)
    for key, more in extra.items():
        rules.setdefault(key, set()).update(more)
    return PrivacyPolicy.of(pol.name, rules)


def _wrapped(coord: Coordinator) -> Any:
    """The algorithm's server inside a deploy coordinator, attached to its transport."""
    inner = coord.inner  # type: ignore[attr-defined]
    inner.transport = coord.transport
    return inner


class _DeployServer(Coordinator):
    """The coordinator process's algorithm object: the unchanged server plus deployment steps.

    ``inner`` is exactly the server the in-process estimator builds (it speaks
    with the coordinator's name); deployment-only steps (fetching the labels,
    scoring, evaluation) are messages of their own around its ``run()``.
    """

    def __init__(self, name: str, inner: Coordinator, **info: Any) -> None:
        super().__init__(name)
        inner.name, inner.role = name, "coordinator"
        self.inner = inner
        self.info = info
        self.results: dict[str, Any] = {}

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.inner.state_dict()

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        self.inner.load_state(state)


def _load_subsample(cfg: Any, views: Sequence[str]) -> Any:
    from fedviews.data import balanced_subsample, load

    spec = cfg.data
    ds = load(spec.dataset, **({"views": list(views)} if views else {}))
    if spec.n_per_class:
        ds = ds.subset(balanced_subsample(ds.y, spec.n_per_class, random_state=cfg.seed))
    return ds


# =========================================================================== H-FedMV


@dataclass(frozen=True)
class HFedMVDeployParams:
    """Hyper-parameters of :class:`fedviews.linear.HFedMV` (same names and defaults).

    ``standardize``: ``"pooled"`` (federated mean / standard deviation of all
    clients' training samples), ``"local"`` (each client its own) or ``"none"``.
    ``evaluate``: every client predicts its own test split with the final global
    model and reports its counts.
    """

    beta: float = 4.0
    zeta: float = 8.0
    eta: float = 16.0
    n_rounds: int = 20
    local_iter: int = 2
    inner_max_iter: int = 5
    inner_tol: float = 1e-6
    test_max_iter: int = 1000
    test_tol: float = 1e-8
    eps: float = 1e-10
    standardize: str = "pooled"
    evaluate: bool = True

    def validate(self) -> None:
        _positive(self, "beta", "zeta", "eta", "eps")
        _at_least_one(self, "n_rounds", "local_iter", "inner_max_iter", "test_max_iter")
        if min(self.inner_tol, self.test_tol) < 0:
            raise ConfigError("params.inner_tol and test_tol must be >= 0")
        if self.standardize not in STANDARDIZE:
            raise ConfigError(f"params.standardize must be one of {list(STANDARDIZE)}")


class HFedMVDeployClient(Party):
    """An H-FedMV client process's algorithm object: :class:`HFedMVClient` plus deployment steps.

    ``inner`` is exactly the in-process client; with pooled standardisation it is
    built when the pooled statistics arrive (``hfedmv:scale``). ``hfedmv:moments``
    reports this client's per-feature sums, ``hfedmv:final`` brings the final
    global ``W_k``, which this client keeps and uses to predict its test split.
    """

    def __init__(
        self,
        name: str,
        views: list[np.ndarray],
        Y: np.ndarray,
        make: Any,
        *,
        standardize: str,
        test_views: list[np.ndarray] | None = None,
        y_test: np.ndarray | None = None,
        zetas: Sequence[float] = (),
        test_max_iter: int = 1000,
        test_tol: float = 1e-8,
    ) -> None:
        super().__init__(name, role="client")
        self.views, self.Y, self.make = views, Y, make
        self.test_views, self.y_test = test_views, y_test
        self.zetas, self.test_max_iter, self.test_tol = list(zetas), test_max_iter, test_tol
        self.scaler: tuple[np.ndarray, np.ndarray] | None = None
        self.inner: HFedMVClient | None = None
        self._pending: Mapping[str, np.ndarray] | None = None
        self.W: list[np.ndarray] = []
        self.Z_test: np.ndarray | None = None
        self.y_test_pred: np.ndarray | None = None
        if standardize == "local":
            self._build(_scaler(np.hstack(views)))
        elif standardize == "none":
            self._build(None)

    def _build(self, scaler: tuple[np.ndarray, np.ndarray] | None) -> None:
        self.scaler = scaler
        views = self._scaled(self.views)
        self.inner = self.make(views)
        if self._pending is not None:
            self.inner.load_state(self._pending)
            self._pending = None

    def _scaled(self, views: list[np.ndarray]) -> list[np.ndarray]:
        if self.scaler is None:
            return views
        X = (np.hstack(views) - self.scaler[0]) / self.scaler[1]
        cuts = np.cumsum([v.shape[1] for v in views])[:-1]
        return [np.ascontiguousarray(v) for v in np.split(X, cuts, axis=1)]

    def handle(self, msg: Message) -> Message:
        if msg.kind in self._handlers:
            return super().handle(msg)
        if self.inner is None:
            raise ProtocolError(f"{self.name!r} got {msg.kind!r} before the pooled statistics")
        return self.inner.handle(msg)

    @handles("hfedmv:moments")
    def on_moments(self, msg: Message) -> Message:
        X = np.hstack(self.views)
        mean = X.mean(axis=0)
        return self.reply(
            msg,
            arrays={"x_sum": X.sum(axis=0), "x_m2": ((X - mean) ** 2).sum(axis=0)},
            meta={"n_samples": len(X)},
        )

    @handles("hfedmv:scale")
    def on_scale(self, msg: Message) -> Message:
        self._build((msg.arrays["x_mean"], msg.arrays["x_scale"]))
        return self.reply(msg)

    @handles("hfedmv:final")
    def on_final(self, msg: Message) -> Message:
        from fedviews.linear._fedmv import fedmv_consensus

        K = len(self.views)
        self.W = [np.asarray(msg.arrays[f"W_{k}"]) for k in range(K)]
        if self.test_views is None or self.y_test is None:
            return self.reply(msg)
        Xs = self._scaled(self.test_views)
        self.Z_test, _ = fedmv_consensus(
            [X @ W for X, W in zip(Xs, self.W, strict=True)],
            self.zetas,
            max_iter=self.test_max_iter,
            tol=self.test_tol,
        )
        self.y_test_pred = np.argmax(self.Z_test, axis=1)
        correct = int(np.sum(self.y_test_pred == self.y_test))
        return self.reply(msg, meta={"n_test": len(self.y_test), "n_correct": correct})

    def state_dict(self) -> dict[str, np.ndarray]:
        if self.inner is None:
            raise ProtocolError(f"{self.name!r} has no state before its first round")
        return self.inner.state_dict()

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        if self.inner is None:  # pooled standardisation: built after the statistics arrive
            self._pending = dict(state)
        else:
            self.inner.load_state(state)


def _hfedmv_policy(n_views: int = MAX_VIEWS) -> PrivacyPolicy:
    from fedviews.linear._fedmv import hfedmv_policy

    return _as_coordinator(
        hfedmv_policy(n_views),
        {
            ("client", "coordinator"): ["x_sum", "x_m2"],
            ("coordinator", "client"): ["x_mean", "x_scale"],
        },
    )


# -- shared with S-FedMV (horizontal federations: every client holds labels) -------------


def check_clients(fed: Roster, algorithm: str) -> None:
    """Every party is a client that owns its labels: ``label_owners`` lists them all."""
    if set(fed.label_owners) != set(fed.parties):
        raise ConfigError(
            f"{algorithm}: every client holds the labels of its own samples; set "
            f"federation.label_owners = federation.parties ({list(fed.parties)})"
        )


def client_groups(cfg: RunSpec) -> list[AlignGroup]:
    """One alignment group per client (its own IDs), and one per client's test split."""
    out = [AlignGroup(c, (c,)) for c in cfg.federation.parties]
    if cfg.params.evaluate:
        out += [AlignGroup(f"{c}:test", (c,), "test") for c in cfg.federation.parties]
    return out


def check_client_data(cfg: RunSpec, party: str, data: PartyData, ndim: int) -> None:
    """Labels are class indices; ``X`` has ``ndim`` axes; a test split when evaluating."""
    X = data.features
    if X.ndim != ndim or X.shape[-1] == 0:
        shape = "(n, d_1 + ... + d_K)" if ndim == 2 else "(n, T, c_1 + ... + c_K)"
        raise DataError(f"client {party!r} must hold X of shape {shape}, got {X.shape}")
    if data.view_dims is not None and len(data.view_dims) > MAX_VIEWS:
        raise DataError(f"client {party!r} holds {len(data.view_dims)} views; at most {MAX_VIEWS}")
    for what, y in (("y", data.y), ("y_test", data.y_test)):
        if y is not None and (not np.issubdtype(y.dtype, np.integer) or (y < 0).any()):
            raise DataError(f"client {party!r}: {what} must hold class indices 0..C-1 (integers)")
    if cfg.params.evaluate and (data.X_test is None or data.y_test is None):
        raise DataError(
            f"client {party!r}: its file needs ids_test, X_test and y_test "
            "(or set params.evaluate = false)"
        )


def client_info(local: Local) -> dict[str, Any]:
    data = local.data
    assert data.y is not None
    dims = data.view_dims or (data.features.shape[-1],)
    return {"n_classes": int(np.max(data.y)) + 1, "view_dims": ",".join(map(str, dims))}


def client_setup(cfg: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The agreed label set (``0..C-1``) and view layout, checked to be the same everywhere."""
    layouts = {p: str(infos[p]["view_dims"]) for p in cfg.federation.parties}
    if len(set(layouts.values())) != 1:
        raise DataError(
            f"the clients' views differ (view_dims per client: {layouts}); every client must "
            "hold every view with the same features"
        )
    n_classes = max(int(infos[p]["n_classes"]) for p in cfg.federation.parties)
    if n_classes < 2:
        raise DataError("the clients' labels contain fewer than two classes")
    return {"n_classes": n_classes, "view_dims": next(iter(layouts.values()))}


def view_dims_of(setup: Mapping[str, Any]) -> list[int]:
    return [int(d) for d in str(setup["view_dims"]).split(",")]


def final_to_clients(server: HFedMVServer, clients: Sequence[str], round: int) -> dict[str, Any]:
    """Send the final global ``W_k``; return the pooled test accuracy of the clients' reports."""
    replies = server.broadcast(
        list(clients),
        "hfedmv:final",
        arrays={f"W_{k}": W for k, W in enumerate(server.W)},
        round=round,
    )
    if any("n_test" not in r.meta for r in replies.values()):
        return {}
    counts = {
        c: (int(_number(r, "n_test")), int(_number(r, "n_correct"))) for c, r in replies.items()
    }
    n_test = sum(n for n, _ in counts.values())
    correct = sum(k for _, k in counts.values())
    return {
        "test_accuracy": correct / max(n_test, 1),
        "n_test": n_test,
        "test_accuracy_per_client": {c: k / max(n, 1) for c, (n, k) in counts.items()},
    }


def _number(msg: Message, key: str) -> float:
    value = msg.meta.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError(f"{msg.sender} sent meta[{key!r}] = {value!r}, expected a number")
    return float(value)


def client_results(client: HFedMVDeployClient) -> dict[str, np.ndarray]:
    """What a client keeps: the final global model, its scaler, its test predictions."""
    from fedviews.linear._l21 import row_norms

    out: dict[str, np.ndarray] = {f"W_{k}": W for k, W in enumerate(client.W)}
    out.update({f"feature_importances_{k}": row_norms(W) for k, W in enumerate(client.W)})
    if client.scaler is not None:
        out.update(x_mean=client.scaler[0], x_scale=client.scaler[1])
    if client.y_test_pred is not None:
        out["y_test_pred"] = client.y_test_pred
    return out


class ClientDeployApp(Algorithm):
    """Horizontal clients (H-FedMV, S-FedMV): every party a client with its own labelled samples."""

    client_ndim: ClassVar[int] = 2  # of X: (n, d) features or (n, T, d) sequences

    def role(self, cfg: RunSpec, party: str) -> str:
        return "client"

    def check_federation(self, fed: Roster) -> None:
        check_clients(fed, self.name)

    def groups(self, cfg: RunSpec) -> list[AlignGroup]:
        return client_groups(cfg)

    def check_data(self, cfg: RunSpec, party: str, data: PartyData) -> None:
        super().check_data(cfg, party, data)
        check_client_data(cfg, party, data, ndim=self.client_ndim)

    def party_info(self, cfg: RunSpec, party: str, local: Local) -> dict[str, Any]:
        return client_info(local)

    def make_setup(self, cfg: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        return client_setup(cfg, infos)


class HFedMVApp(ClientDeployApp):
    name = "hfedmv"
    Params = HFedMVDeployParams

    def policy(self, cfg: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        return _hfedmv_policy()

    def build_party(
        self, cfg: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> Party:
        from fedviews.linear._consensus import IRLSOptions
        from fedviews.linear._fedmv import HFedMVClient, _LocalMVL

        p: HFedMVDeployParams = cfg.params
        fed = cfg.federation
        ss = np.random.SeedSequence(cfg.seed).spawn(len(fed.parties) + 1)
        seed = ss[1 + fed.parties.index(party)]
        K = len(view_dims_of(setup))
        c = int(setup["n_classes"])
        _, X, y = local.take(party)
        assert y is not None
        Y = np.eye(c)[np.asarray(y, dtype=np.int64)]
        views = [np.ascontiguousarray(v, dtype=np.float64) for v in local.data.views(X)]
        test_views = y_test = None
        if f"{party}:test" in local.rows:
            _, Xt, y_test = local.take(f"{party}:test")
            test_views = [np.ascontiguousarray(v, dtype=np.float64) for v in local.data.views(Xt)]
        solver = IRLSOptions(p.inner_max_iter, p.inner_tol, p.eps)

        def make(Xs: list[np.ndarray]) -> HFedMVClient:
            learner = _LocalMVL(
                Xs, Y, betas=[p.beta] * K, zetas=[p.zeta] * K, eta=p.eta, seed=seed, solver=solver
            )
            return HFedMVClient(party, learner, len(Y), p.local_iter)

        return HFedMVDeployClient(
            party,
            views,
            Y,
            make,
            standardize=p.standardize,
            test_views=test_views,
            y_test=y_test,
            zetas=[p.zeta] * K,
            test_max_iter=p.test_max_iter,
            test_tol=p.test_tol,
        )

    def build_coordinator(
        self, cfg: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> Coordinator:
        from fedviews.linear._fedmv import HFedMVServer, _init_W

        p: HFedMVDeployParams = cfg.params
        clients = list(cfg.federation.parties)
        ss = np.random.SeedSequence(cfg.seed).spawn(len(clients) + 1)
        W0 = _init_W(view_dims_of(setup), int(setup["n_classes"]), ss[0])
        server = HFedMVServer(clients, W0, p.n_rounds)
        return _DeployServer(cfg.federation.coordinator, server, params=p)

    def run_coordinator(
        self, coord: Coordinator, on_round_end: Callable[[int], None] | None = None
    ) -> Any:
        server: HFedMVServer = _wrapped(coord)
        p: HFedMVDeployParams = coord.info["params"]  # type: ignore[attr-defined]
        if p.standardize == "pooled":
            pooled_scaler(server, server.clients)
        server.run(on_round_end=on_round_end)
        coord.results.update(final_to_clients(server, server.clients, p.n_rounds))  # type: ignore[attr-defined]
        return server.W

    def round_message(self, role: str) -> str:
        return "local_train"

    def progress(self, coord: Coordinator) -> list[str]:
        server: HFedMVServer = coord.inner  # type: ignore[attr-defined]
        lines = [f"round {r + 1}: objective {v:.6g}" for r, v in enumerate(list(server.objective))]
        return lines + _accuracy_line(coord.results)  # type: ignore[attr-defined]

    def party_results(self, party: Party) -> dict[str, np.ndarray]:
        return client_results(party)  # type: ignore[arg-type]

    def coordinator_results(
        self, coord: Coordinator
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        server: HFedMVServer = coord.inner  # type: ignore[attr-defined]
        obj = list(server.objective)
        metrics = {"objective": obj, "rounds_done": len(obj), **coord.results}  # type: ignore[attr-defined]
        return metrics, {f"W_{k}": W for k, W in enumerate(server.W)}

    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """Each client's data from ``[data]`` (see :func:`hfedmv_demo_data`)."""
        return hfedmv_demo_data(cfg)


def _accuracy_line(res: Mapping[str, Any]) -> list[str]:
    if "test_accuracy" not in res:
        return []
    return [
        f"test: accuracy {res['test_accuracy']:.4f} on {res['n_test']} samples "
        "(every client predicts its own)"
    ]


def pooled_scaler(server: Coordinator, clients: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Pooled training mean / standard deviation from the clients' sums; sent back to them."""
    replies = server.broadcast(list(clients), "hfedmv:moments")
    n = np.array([_number(replies[c], "n_samples") for c in clients])
    sums = np.stack([replies[c].arrays["x_sum"] for c in clients])
    m2 = np.stack([replies[c].arrays["x_m2"] for c in clients])
    mean = sums.sum(axis=0) / n.sum()
    means = sums / n[:, None]
    var = (m2.sum(axis=0) + (n[:, None] * (means - mean) ** 2).sum(axis=0)) / n.sum()
    sd = np.sqrt(var)
    sd[sd < 1e-12] = 1.0
    server.broadcast(list(clients), "hfedmv:scale", arrays={"x_mean": mean, "x_scale": sd})
    return mean, sd


def hfedmv_demo_data(cfg: Any) -> dict[str, PartyData]:
    """Deal a built-in multi-view dataset to the clients: all views of their own samples.

    ``[data]``: ``dataset``, ``views`` (default: all of the dataset's), ``n_per_class``
    (balanced subsample, 0 = all), ``n_test`` (stratified held-out samples, dealt
    IID to the clients, 0 = none), ``scenario`` (how the training samples are
    dealt, :func:`fedviews.data.partition_clients`: ``"iid"``, ``"label_skew"``,
    ``"dirichlet"``). Labels are written as class indices ``0..C-1``; every file
    holds ``view_dims`` and lists its rows in its own random order.
    """
    from fedviews.data import partition_clients

    fed, spec = cfg.federation, cfg.data
    ds = _load_subsample(cfg, spec.views)
    classes = np.unique(ds.y)
    y = np.searchsorted(classes, np.asarray(ds.y)).astype(np.int64)
    X = np.hstack([np.asarray(v, dtype=np.float64) for v in ds.views])
    dims = [int(v.shape[1]) for v in ds.views]
    tr, te = held_out_split(y, spec.n_test, cfg.seed)
    M = len(fed.parties)
    parts = partition_clients(y[tr], M, spec.scenario, random_state=cfg.seed)
    tparts = partition_clients(y[te], M, "iid", random_state=cfg.seed) if len(te) else None
    rng = np.random.default_rng(cfg.seed)
    files: dict[str, PartyData] = {}
    for m, client in enumerate(fed.parties):
        rows = tr[parts[m]][rng.permutation(len(parts[m]))]
        test: dict[str, Any] = {}
        if tparts is not None:
            trows = te[tparts[m]][rng.permutation(len(tparts[m]))]
            test = {"ids_test": ds.ids[trows], "X_test": X[trows], "y_test": y[trows]}
        files[client] = PartyData(ds.ids[rows], X[rows], y[rows], view_dims=tuple(dims), **test)
    return files


register_algorithm_spec(HFedMVApp())
