r"""V-FedMV (Che et al., Algorithm 2): its params and spec (the parties: :mod:`.parties`).

Party ``k`` holds view ``X_k``; the server runs the Z step (Eq. 10) with the
labels. The protocol is the shared consensus protocol of
:mod:`fedviews.linear._consensus` with the label term at the server. Where the
labels are: the paper's server holds ``Y`` (the estimator: the roster names the
coordinator as label owner); in a deployment the server is a separate process,
so a label-owner party sends the one-hot ``Y`` to it once before round 1 and
scores the test consensus (``evaluate``). Crossing the barrier: ``Z_k`` (and
``Z_k_test``) party → server, ``Z`` (and ``Z_test``) server → party, ``Y`` once
label owner → server when the labels are at a party; ``X_k``, ``X_k^test`` and
``W_k`` never leave their party.

FedMV (Che et al.): vertical and horizontal federated multi-view learning.

Multi-view objective (Eq. 1), views ``k = 1..K``, one-hot labels ``Y``:

.. math::
    \sum_k \|X_k W_k - Z_k\|_F^2 + \beta_k \|W_k\|_{2,1} + \zeta_k \|Z_k - Z\|_F^2
    + \eta \|Z - Y\|_F^2

ℓ2,1 norm. The paper defines ``||W||_{2,1}`` once as a sum over *columns* but
says it promotes *row* sparsity for feature selection and uses the row-wise
reweighting of Eq. (5) (``A_k`` is ``d_k x d_k``, one weight per row). We use the
row-wise norm (rows of ``W_k`` are features), consistent with Eqs. (5)-(6).

Training (block-coordinate descent, every step an exact block minimisation or an
IRLS majorisation step, so the objective is non-increasing):

* W step (Eqs. 5-6): IRLS on ``min ||X_k W_k - Z_k||^2 + beta_k ||W_k||_{2,1}``,
  warm-started, with the cached Gram / Woodbury solver of :class:`L21Problem`;
* Z_k step (Eq. 8): ``Z_k = (X_k W_k + zeta_k Z) / (1 + zeta_k)``;
* Z step (Eq. 10): ``Z = (sum_k zeta_k Z_k + eta Y) / (sum_k zeta_k + eta)``.

Testing phase (Eqs. 2, 12-13): with ``P_k = X_k^test W_k`` fixed, alternate
``Z^test = sum zeta_k Z_k^test / sum zeta_k`` and
``Z_k^test = (P_k + zeta_k Z^test) / (1 + zeta_k)`` from ``Z_k^test = P_k``; the
prediction is ``argmax Z^test``. Eliminating ``Z_k^test`` shows that the iteration
converges to the closed-form minimiser of Eq. (2),
``Z^test = sum_k w_k P_k / sum_k w_k`` with ``w_k = zeta_k / (1 + zeta_k)``, at the
linear rate ``sum_k (zeta_k^2/(1+zeta_k)) / sum_k zeta_k`` per iteration.

The testing phase (:func:`~fedviews.linear.fedmv_consensus` where one holder runs it
alone) is shared with H-FedMV (Algorithm 3, :mod:`fedviews.linear.hfedmv`), whose
clients run the same three steps locally (Eqs. 14-17).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedviews._params import COUNT, FLAG, POSITIVE, TOL, WEIGHTS, Checked
from fedviews.data import PartyData, one_hot
from fedviews.errors import ConfigError, DataError
from fedviews.federation import (
    AlignGroup,
    Local,
    Party,
    Prediction,
    PrivacyPolicy,
    Roster,
    RunSpec,
    register_algorithm_spec,
    spawn_streams,
)
from fedviews.linear._common import per_party
from fedviews.linear._consensus_spec import ConsensusAlgorithm
from fedviews.linear._testing_phase import ConsensusTester
from fedviews.linear.vfedmv.parties import VFedMVParty, VFedMVServer


def vfedmv_policy(*, labels_at_party: bool = False, evaluate: bool = False) -> PrivacyPolicy:
    """The V-FedMV barrier: ``Z_k``/``Z`` (and test twins); ``Y`` once if a party holds it."""
    up, down = ["Z_k", "Z_k_test"], ["Z", "Z_test"]
    rules = {("party", "coordinator"): up, ("coordinator", "party"): down}
    kinds = {("coordinator", "party"): ["update", "test_init", "test_update"]}
    if labels_at_party:
        rules[("label_owner", "coordinator")] = [*up, "Y"]
        rules[("coordinator", "label_owner")] = down
        extra = ["labels", "score"] if evaluate else ["labels"]
        kinds[("coordinator", "label_owner")] = kinds[("coordinator", "party")] + extra
    return PrivacyPolicy.of("v-fedmv", rules, kinds=kinds)


#: the paper's barrier: the server holds the labels
VFEDMV_POLICY = vfedmv_policy()


@dataclass(frozen=True)
class VFedMVParams(Checked):
    """Hyper-parameters of V-FedMV: the one declaration used by :class:`VFedMV`, experiments
    and deployments (``[params]``).

    ``beta``/``zeta``: one value or one per party. ``standardize``: every party
    scales its view (and its test rows) with its own training mean and standard
    deviation. ``evaluate`` (deployments): after training, run the testing phase
    on the parties' test splits; the label owner scores it (the estimator
    predicts with :meth:`VFedMV.predict` instead).
    """

    beta: float | tuple[float, ...] = field(default=4.0, metadata=WEIGHTS)
    zeta: float | tuple[float, ...] = field(default=8.0, metadata=WEIGHTS)
    eta: float = field(default=16.0, metadata=POSITIVE)
    max_iter: int = field(default=30, metadata=COUNT)
    tol: float = field(default=1e-6, metadata=TOL)
    inner_max_iter: int = field(default=20, metadata=COUNT)
    inner_tol: float = field(default=1e-6, metadata=TOL)
    test_max_iter: int = field(default=1000, metadata=COUNT)
    test_tol: float = field(default=1e-8, metadata=TOL)
    eps: float = field(default=1e-10, metadata=POSITIVE)
    standardize: bool = field(default=False, metadata=FLAG)
    evaluate: bool = field(default=False, metadata=FLAG)


class VFedMVAlgorithm(ConsensusAlgorithm):
    """V-FedMV as a federated algorithm: view owners, one label owner (a party or the server)."""

    name = "vfedmv"
    Params = VFedMVParams

    @staticmethod
    def _owner(run: RunSpec) -> str:
        return run.federation.owners()[0]

    def _labels_at_party(self, run: RunSpec) -> bool:
        return self._owner(run) != run.federation.coordinator

    def role(self, run: RunSpec, party: str) -> str:
        return "label_owner" if party == self._owner(run) else "party"

    def check_federation(self, fed: Roster) -> None:
        super().check_federation(fed)
        if fed.owners()[0] not in (*fed.parties, fed.coordinator):
            raise ConfigError(f"the label owner {fed.owners()[0]!r} is not a party")

    def check_params(self, params: Any, fed: Roster) -> None:
        super().check_params(params, fed)
        if params.evaluate and fed.owners()[0] == fed.coordinator:
            raise ConfigError("params.evaluate needs the labels at a party (the scorer)")

    def groups(self, run: RunSpec) -> list[AlignGroup]:
        parties = tuple(run.federation.parties)
        members = parties if self._labels_at_party(run) else (*parties, run.federation.coordinator)
        out = [AlignGroup("train", members)]
        if run.params.evaluate:
            out.append(AlignGroup("test", parties, "test"))
        return out

    def check_data(self, run: RunSpec, party: str, data: PartyData) -> None:
        super().check_data(run, party, data)
        if party == run.federation.coordinator:
            return  # the server's labels: no view
        if data.features.ndim != 2 or data.features.shape[1] == 0:
            raise DataError(
                f"{party!r} must hold one view as a 2-D X (n, d) with d >= 1, got X of shape "
                f"{data.features.shape}"
            )
        if data.view_dims is not None and len(data.view_dims) > 1:
            raise DataError(f"{party!r}: a V-FedMV party holds one view (its file has view_dims)")
        if run.params.evaluate:
            if data.X_test is None:
                raise DataError(
                    f"{party!r}: its file needs ids_test and X_test (or set params.evaluate = false)"
                )
            if party == self._owner(run) and data.y_test is None:
                raise DataError(
                    f"label owner {party!r}: its file needs y_test (or set params.evaluate = false)"
                )

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        plain = vfedmv_policy(
            labels_at_party=self._labels_at_party(run), evaluate=run.params.evaluate
        )
        return self.secured(run, plain)

    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> VFedMVParty:
        y, y_test, kwargs = self.party_inputs(run, party, local, setup)
        labels = None if y is None else (one_hot(y)[0], np.unique(y), y_test)
        return VFedMVParty(party, role=self.role(run, party), labels=labels, **kwargs)

    def build_coordinator(
        self, run: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> VFedMVServer:
        p: VFedMVParams = run.params
        n, c = int(setup["n_samples"]), int(setup["n_classes"])
        owner: str | None = self._owner(run)
        if local is not None:  # the server holds the labels (the paper)
            _, _, y = local.take("train")
            assert y is not None
            Y, owner = one_hot(y)[0], None
        else:  # a placeholder: the label owner sends Y before round 1
            Y = np.zeros((n, c))
        return VFedMVServer(
            run.federation.parties,
            Y,
            p.eta,
            spawn_streams(run.seed, len(run.federation.parties) + 1)[0],
            max_iter=p.max_iter,
            tol=p.tol,
            label_owner=owner,
            test=(p.test_max_iter, p.test_tol) if p.evaluate else None,
            frac_bits=run.defense.secagg_bits,
            test_rows=setup.get("n_test"),
        )

    # -- prediction ------------------------------------------------------------
    def predict_groups(self, run: RunSpec) -> list[AlignGroup]:
        """Every party's new rows (the paper's testing phase takes a test view of each)."""
        if not self._labels_at_party(run):
            raise ConfigError(
                "`fedviews predict` puts the predictions with the label owner: name a party as "
                "federation.label_owner (here the coordinator holds the labels)"
            )
        return [AlignGroup("predict", tuple(run.federation.parties))]

    def predict_policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        """The testing phase (Eqs. 12-13): ``Z_k_test`` up, ``Z_test`` down, and the last
        ``Z_test`` to the label owner (``predict``); ``X_k^test`` and ``W_k`` stay."""
        rules = {
            ("party", "coordinator"): ["Z_k_test"],
            ("label_owner", "coordinator"): ["Z_k_test"],
            ("coordinator", "party"): ["Z_test"],
            ("coordinator", "label_owner"): ["Z_test"],
        }
        phase = ["test_init", "test_update"]
        kinds = {
            ("coordinator", "party"): phase,
            ("coordinator", "label_owner"): [*phase, "predict"],
        }
        return self.secured(run, PrivacyPolicy.of("v-fedmv-predict", rules, kinds=kinds))

    def build_predictor(
        self, run: RunSpec, party: str, model: Mapping[str, np.ndarray], local: Local,
        setup: Mapping[str, Any],
    ) -> ConsensusTester:  # fmt: skip
        """Party ``k`` with its fitted ``W_k`` (and scaler, and at the label owner its
        ``classes``), holding its aligned new rows as the test view."""
        p: VFedMVParams = run.params
        parties = run.federation.parties
        _, X, _ = local.take("predict")
        X = X.reshape(len(X), -1).astype(np.float64)
        c = int(setup["n_classes"])
        W = np.asarray(model.get("W", np.zeros((0, 0))))
        if W.shape != (X.shape[1], c):
            raise DataError(
                f"{party!r}: its new rows have {X.shape[1]} features, but its model part "
                f"holds W of shape {W.shape} (features x the {c} trained classes): give it rows "
                "of the columns it trained on"
            )
        scaler = (model["x_mean"], model["x_scale"]) if "x_mean" in model else None
        classes = model.get("classes") if party == self._owner(run) else None
        if party == self._owner(run) and (classes is None or classes.shape != (c,)):
            raise DataError(f"label owner {party!r}: its model part lacks the {c} classes")
        return ConsensusTester(
            party,
            zeta=per_party(p.zeta, len(parties), "zeta")[parties.index(party)],
            role=self.role(run, party),
            W=W,
            scaler=scaler,
            X_test=X,
            classes=classes,
            secure=run.defense.secagg_bits is not None,
        )

    def build_predict_coordinator(self, run: RunSpec, setup: Mapping[str, Any]) -> VFedMVServer:
        """The server, to run the testing phase only (:meth:`VFedMVServer.predict`)."""
        server = self.build_coordinator(run, setup)
        server.test = (run.params.test_max_iter, run.params.test_tol)
        server.test_rows = int(setup["n/predict"])  # the new rows, not the training's test rows
        return server

    def predictions(self, party: Party) -> Prediction | None:
        """The label owner's: ``argmax`` of the consensus, and the consensus as scores."""
        if not isinstance(party, ConsensusTester) or party.y_test_pred is None:
            return None
        return Prediction("predict", party.y_test_pred, party.Z_test)


VFEDMV_SPEC = register_algorithm_spec(VFedMVAlgorithm())
