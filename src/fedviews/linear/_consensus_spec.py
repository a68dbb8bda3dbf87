"""What the MMVFL and V-FedMV specs share (:class:`ConsensusAlgorithm`): roles, params
checked per party, the label owner's class count, the secured policy, what an attacker
observes, and how a party reads its data. The parties are in
:mod:`fedviews.linear._consensus`, which never imports this module."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedviews.data import standardized_with
from fedviews.errors import DataError
from fedviews.federation import (
    Local,
    Observation,
    PrivacyPolicy,
    Recording,
    Roster,
    RunSpec,
    secured_policy,
    spawn_streams,
)
from fedviews.linear._common import LinearAlgorithm, per_party
from fedviews.linear._consensus import IRLSOptions, secure_sums, z_step
from fedviews.linear._testing_phase import masked_names


class ConsensusAlgorithm(LinearAlgorithm):
    """What the MMVFL and V-FedMV specs share: params checked per party, at least two
    classes and how a party reads its data; the server and parties report progress and
    results themselves (the specs differ in roles, params and where ``eta Y`` sits).
    Both take secure aggregation of the ``Z_k`` (``defense.kind = "secagg"``)."""

    defenses = frozenset({"none", "secagg", "label_rr"})

    def secured(self, run: RunSpec, policy: PrivacyPolicy) -> PrivacyPolicy:
        """``policy``, with the masked arrays in place of ``Z_k``/``Z_k_test`` under secagg."""
        if run.defense.secagg_bits is None:
            return policy
        return secured_policy(policy, {n: masked_names(n) for n in ("Z_k", "Z_k_test")})

    def per_party_count(self, fed: Roster) -> int | None:
        return len(fed.parties)  # beta/zeta: one per party

    def planned_rounds(self, run: RunSpec, setup: Mapping[str, Any]) -> int:
        return int(run.params.max_iter)  # fewer where the objective converged first

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        setup = super().make_setup(run, infos)
        # the label owner must report it (read from its report: a missing one names it)
        setup["n_classes"] = int(infos[run.federation.owners()[0]]["n_classes"])
        if setup["n_classes"] < 2:
            raise DataError("y must contain at least two classes")
        if "n/test" in infos[run.federation.owners()[0]]:  # (every member's, checked equal)
            setup["n_test"] = int(infos[run.federation.owners()[0]]["n/test"])
        return setup

    def observations(
        self, run: RunSpec, setup: Mapping[str, Any], recording: Recording
    ) -> list[Observation]:
        """The label owner's labels as others see them: every party receives the consensus
        ``Z`` (close to the one-hot ``Y``: it is pulled towards it); the coordinator
        computes it from the ``Z_k`` and their ``zeta`` (and with a label-owner party,
        receives ``Y`` itself). Rows: the ``train`` group, in the aligned order; with a
        testing phase, also its consensus ``Z_test`` (rows of the ``test`` group): the
        model's predictions of the label owner's test samples."""
        owner = run.federation.owners()[0]
        if recording.party == owner:
            return []  # its own labels
        rows = np.arange(int(setup["n_samples"]))
        out = []
        for m in recording.select("labels:reply", "Y")[-1:]:
            out.append(Observation("Y", "consensus", "train", rows, m.arrays["Y"], owner))
        for m in recording.select("update", "Z")[-1:]:
            out.append(Observation("Z", "consensus", "train", rows, m.arrays["Z"], owner))
        for m in recording.select("test_update", "Z_test")[-1:]:  # the testing phase
            Z = m.arrays["Z_test"]
            out.append(Observation("Z_test", "consensus", "test", np.arange(len(Z)), Z, owner))
        replies = recording.select("update:reply", "Z_k")
        last = [m for m in replies if m.round == max((r.round for r in replies), default=0)]
        if last:  # the coordinator's own consensus (MMVFL Eq. 14), from what it received
            Z = z_step(
                [float(m.meta.get("zeta") or 1.0) for m in last], [m.arrays["Z_k"] for m in last]
            )
            out.append(Observation("Z from the Z_k", "consensus", "train", rows, Z, owner))
            for m in last:  # each party's own Z_k, less the common part: ~ X_k W_k / (1 + zeta_k)
                scale = 1.0 + float(m.meta.get("zeta") or 0.0)
                rep = scale * (m.arrays["Z_k"] - Z)
                name = f"Z_k of {m.sender}"
                out.append(Observation(name, "representation", "train", rows, rep, None, m.sender))
                # the baseline: what the consensus alone tells about the same features
                name = f"Z, for {m.sender}'s features"
                out.append(Observation(name, "representation", "train", rows, Z, None, m.sender))
        masked = recording.select("update:reply", masked_names("Z_k")[0])
        last = [m for m in masked if m.round == max((r.round for r in masked), default=0)]
        bits = run.defense.secagg_bits
        if last and bits is not None:  # secure aggregation: the sum is all it learns
            msgs = {m.sender: m.message() for m in last}
            S, zsum, _, _ = secure_sums(msgs, "Z_k", int(setup["n_classes"]), bits)
            Z = S / zsum
            out.append(Observation("Z from the masked sum", "consensus", "train", rows, Z, owner))
            for p in run.federation.parties:  # all it has about any party's features
                name = f"Z, for {p}'s features"
                out.append(Observation(name, "representation", "train", rows, Z, None, p))
        return out

    def party_inputs(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> tuple[np.ndarray | None, np.ndarray | None, dict[str, Any]]:
        """What party ``k`` builds its :class:`ConsensusParty` from, all of it its own:
        ``(y, y_test, kwargs)``. ``y``/``y_test``: its labels, if any; ``kwargs``: ``X``,
        ``X_test`` (with a ``test`` group), ``scaler`` (with ``params.standardize``: its own
        training mean and standard deviation, which scaled ``X`` and scales every test view
        it loads; nothing crosses), ``beta_k``, ``zeta_k``, ``n_classes``, the ``Z_k``
        stream ``1 + k`` (stream 0 is the server's ``Z``) and the IRLS options.
        """
        p, parties = run.params, run.federation.parties
        k = parties.index(party)
        _, X, y = local.take("train")
        X = X.reshape(len(X), -1).astype(np.float64)
        X_test = y_test = None
        if "test" in local.rows:
            _, Xt, y_test = local.take("test")
            X_test = Xt.astype(np.float64)
        scaler = None
        if p.standardize:
            X, scaler = standardized_with(X)
        kwargs = {
            "X": X,
            "X_test": X_test,
            "scaler": scaler,
            "beta": per_party(p.beta, len(parties), "beta")[k],
            "zeta": per_party(p.zeta, len(parties), "zeta")[k],
            "n_classes": int(setup["n_classes"]),
            "seed": spawn_streams(run.seed, len(parties) + 1)[1 + k],
            "solver": IRLSOptions(p.inner_max_iter, p.inner_tol, p.eps),
            "secure": run.defense.secagg_bits is not None,
        }
        return y, y_test, kwargs
