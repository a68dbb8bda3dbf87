"""An algorithm, defined once: its spec, and the runner that executes it in one process.

An :class:`Algorithm` declares everything about a federated algorithm that does
not depend on where it runs: its hyper-parameters (:attr:`Algorithm.Params`, a
frozen dataclass and the only declaration of them), the role of every party, the
groups of parties whose sample IDs are aligned together, the privacy policy of
*this* run (computed from the params and the setup: exact view counts, layer
names and shapes, nothing wider), how one party builds its party object from its
own local data, how the coordinator is built and driven, checkpoint state and
results. The runtime executes the same spec

* in one process (:func:`build_in_process`, used by every estimator's ``fit``),
* one process per party over gRPC, or on Flower (:mod:`fedviews.deploy`, which
  calls the same methods for the one party a process hosts),

so the protocol that tests run in-process is exactly the protocol users deploy.

The setup protocol, wherever it runs: every party aligns its IDs per
:class:`AlignGroup`, reports :meth:`Algorithm.party_info` (scalars, never data);
the coordinator merges them with :meth:`Algorithm.make_setup` and every process
builds its part from that setup.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from threadpoolctl import threadpool_limits

from fedviews._params import Checked, check_params
from fedviews._registry import Registry
from fedviews.data import PartyData, deal_views
from fedviews.errors import ConfigError, DataError, ProtocolError, require
from fedviews.federation._defense import DEFENSES, GAUSSIAN, Defense
from fedviews.federation._party import Coordinator, Party
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._record import Observation, Recording
from fedviews.federation._run import AlignGroup, Local, Roster, RunSpec
from fedviews.federation._secagg import SecureSumParty, check_secure_sum_members


@dataclass(frozen=True)
class Prediction:
    """A party's predictions of its aligned new rows: ``labels`` (and ``scores``, one row
    per sample, where the algorithm has them) of the rows of alignment group ``group``."""

    group: str
    labels: np.ndarray
    scores: np.ndarray | None = None


class Algorithm:
    """The one definition of a federated algorithm (see the module docstring).

    Subclasses set :attr:`name` and :attr:`Params` and implement :meth:`policy`,
    :meth:`build_party` and :meth:`build_coordinator`; the other methods have
    defaults that fit a linear algorithm with one label owner and one alignment
    group of all parties, and that ask the built objects themselves
    (:meth:`Coordinator.run`, :meth:`~Coordinator.progress`,
    :meth:`~Coordinator.summary`, a party's ``results()``). The coordinator's role
    is always ``"coordinator"``.
    """

    name: ClassVar[str]
    Params: ClassVar[type]
    #: whether parties send each other messages (per-batch split learning), rather than
    #: only talking to the coordinator in coarse rounds
    peer_to_peer: ClassVar[bool] = False
    #: BLAS threads of a process that runs a party or the coordinator (``None``: no
    #: limit). One by default: the algorithms do many small factorisations, where
    #: multi-threaded OpenBLAS was measured up to 100x slower on a busy 2-core machine.
    blas_threads: ClassVar[int | None] = 1
    #: the :class:`~fedviews.federation.Defense` kinds that apply to this algorithm
    defenses: ClassVar[frozenset[str]] = frozenset({"none", "label_rr"})
    #: who adds up a secure sum, in words (the members are :meth:`secure_sum_members`)
    secure_sum_of: ClassVar[str] = "parties"

    def dp_releases(self, run: RunSpec) -> int:
        """How many releases of a Gaussian ``grad_dp`` defense each sample's label enters in
        this run (its privacy ledger composes that many); only for algorithms that take it."""
        return 1

    def compute_limits(self) -> AbstractContextManager[Any]:
        """The thread limits under which a process runs its part of this algorithm."""
        if self.blas_threads is None:
            return nullcontext()
        return threadpool_limits(limits=self.blas_threads, user_api="blas")

    # -- who is who ------------------------------------------------------------
    def role(self, run: RunSpec, party: str) -> str:
        return "party"

    def roles(self, run: RunSpec) -> dict[str, str]:
        """``{party: role}`` of every party of the run."""
        return {p: self.role(run, p) for p in run.federation.parties}

    def check_federation(self, fed: Roster) -> None:
        """Raise :class:`ConfigError` when the roster does not fit the algorithm."""
        if len(fed.owners()) != 1:
            raise ConfigError(f"{self.name} has one label owner: set federation.label_owner")

    def check_params(self, params: Any, fed: Roster) -> None:
        """Raise :class:`ConfigError` when ``params`` do not fit this roster (e.g. per-party lists)."""
        if not isinstance(params, self.Params):
            raise ConfigError(
                f"{self.name} takes {self.Params.__name__} params, got {type(params).__name__}"
            )
        if isinstance(params, Checked):
            check_params(params, self.per_party_count(fed))
            return
        validate = getattr(params, "validate", None)  # a Params without declared constraints
        if callable(validate):
            validate()

    def per_party_count(self, fed: Roster) -> int | None:
        """How many values a per-party hyper-parameter list holds in this roster (``None``:
        not known from the roster, e.g. one per view; checked where the views are known)."""
        return None

    def check_defense(self, defense: Defense, fed: Roster | None = None) -> None:
        """Raise :class:`ConfigError` when ``defense`` does not apply to this algorithm (or, with
        ``fed``, to this roster: a secure sum needs two members). Whether it applies is said
        first: the settings of a defense the algorithm does not take do not matter."""
        if defense.kind in DEFENSES and defense.kind not in self.defenses:
            raise ConfigError(
                f"defense {defense.kind!r} does not apply to {self.name}; it takes "
                f"{sorted(self.defenses)}"
            )
        defense.validate()
        if fed is not None and defense.kind == "secagg":
            check_secure_sum_members(self.secure_sum_members(fed), self.secure_sum_of)
        if defense.kind in GAUSSIAN:  # its noise and ledger need the accountant: say so now
            require("dp_accounting", "privacy")

    def groups(self, run: RunSpec) -> list[AlignGroup]:
        """Alignment groups (one PSI each); default: all parties, training IDs."""
        return [AlignGroup("train", tuple(run.federation.parties))]

    def check_data(self, run: RunSpec, party: str, data: PartyData) -> None:
        """Raise :class:`DataError` when ``party``'s data cannot play its part."""
        owners = run.federation.owners()
        if party in owners and data.y is None:
            raise DataError(f"{party!r} is a label owner but its data holds no labels (y)")
        if party not in owners and data.y is not None:
            raise DataError(
                f"{party!r} is not a label owner but its data holds labels (y); "
                "remove them: labels must stay with their owner"
            )

    # -- setup -----------------------------------------------------------------
    def party_info(self, run: RunSpec, party: str, local: Local) -> dict[str, Any]:
        """Scalars a party reports to the coordinator after alignment (no data)."""
        _, X, y = local.take(next(iter(local.rows)))
        info: dict[str, Any] = {"n_features": int(np.prod(X.shape[1:]))}
        if y is not None:
            info["n_classes"] = int(len(np.unique(y)))
        return info

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """What every process needs to build its part (sent to all of them)."""
        first = self.groups(run)[0].name
        name = run.federation.owners()[0]
        owner = infos[name]
        n_samples = int(owner[f"n/{first}"])
        counts = {
            k: v
            for k, v in owner.items()
            if k.startswith("n_") and k not in ("n_samples", "n_features")
        }
        # what the label owner reports sizes every party's allocations: it must be sane
        for k, v in counts.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ProtocolError(
                    f"label owner {name!r} reported {k}={v!r} (not a count)", party=name
                )
        if "n_classes" in counts and not 1 <= counts["n_classes"] <= max(n_samples, 1):
            raise ProtocolError(
                f"label owner {name!r} reported {counts['n_classes']} classes for "
                f"{n_samples} samples",
                party=name,
            )
        return {"n_samples": n_samples, **counts}

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        """The privacy policy of this run: which kinds and arrays may go from role to role."""
        raise NotImplementedError  # pragma: no cover - abstract

    # -- building --------------------------------------------------------------
    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> Party:  # pragma: no cover - abstract
        raise NotImplementedError

    def secure_sum_members(self, fed: Roster) -> tuple[str, ...]:
        """Who adds up a secure sum under ``defense.kind = "secagg"`` (default: every party)."""
        return tuple(fed.parties)

    def make_party(self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]) -> Party:
        """:meth:`build_party`, told who the members of its secure sums are (a party refuses a
        key exchange that lists others: a coordinator that left out members could read what
        the remaining few mask)."""
        return self._told_members(run, self.build_party(run, party, local, setup))

    def _told_members(self, run: RunSpec, built: Party) -> Party:
        if isinstance(built, SecureSumParty) and run.defense.kind == "secagg":
            built.secure_members = frozenset(self.secure_sum_members(run.federation))
        return built

    def build_coordinator(
        self, run: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> Coordinator:  # pragma: no cover - abstract
        """The coordinator; ``local``: its own data where it holds some (e.g. the labels,
        when the roster names the coordinator as label owner: V-FedMV's server holds ``Y``)."""
        raise NotImplementedError

    # -- running ---------------------------------------------------------------
    def round_message(self, role: str) -> str:
        """A party of ``role`` checkpoints when it answers this kind of message (round r)."""
        return "update"

    def run_coordinator(
        self, coord: Coordinator, on_round_end: Callable[[int], None] | None = None
    ) -> Any:
        """Drive the protocol (default: ``coord.run(on_round_end)``)."""
        runner: Any = coord
        try:
            inspect.signature(runner.run).bind(on_round_end)
        except TypeError:
            raise ConfigError(
                f"{type(coord).__name__}.run takes no on_round_end: define "
                "run(self, on_round_end=None) and call on_round_end(r) after each round r "
                "(a deployment checkpoints there; docs/adding-an-algorithm.md)"
            ) from None
        return runner.run(on_round_end)

    def progress(self, coord: Coordinator) -> list[str]:
        """One line per finished round (default: ``coord.progress()``); a round's line starts
        ``round k`` or ``epoch k`` (a deployment numbers it ``k/N``, :meth:`planned_rounds`,
        with :func:`of_planned`)."""
        return coord.progress()

    def planned_rounds(self, run: RunSpec, setup: Mapping[str, Any]) -> int | None:
        """How many rounds (or epochs) the run plans, the ``N`` of a deployment's ``round k/N``
        lines; a run may stop earlier (converged). ``None`` (default): not known, ``round k``."""
        return None

    # -- results ---------------------------------------------------------------
    def party_results(self, party: Party) -> dict[str, np.ndarray]:
        """Arrays a party keeps at the end (default: ``party.results()`` where it has one)."""
        results = getattr(party, "results", None)
        return dict(results()) if callable(results) else {}

    def write_party_results(self, party: Party, out_dir: Path) -> None:
        """Write a party's results into its own folder (default: ``result.npz``)."""
        arrays: dict[str, Any] = dict(self.party_results(party))
        np.savez(out_dir / "result.npz", **arrays)

    def coordinator_results(
        self, coord: Coordinator
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(metrics for results.json, arrays for result.npz)`` (default: ``coord.summary()``)."""
        return coord.summary()

    # -- prediction (``fedviews predict``) ---------------------------------------
    #: how its parties predict new rows where a deployment of it does not predict together
    #: (``fedviews predict`` says it); ``None``: it does (:meth:`predict_groups` and the rest)
    predicts_alone: ClassVar[str | None] = None

    def predict_groups(self, run: RunSpec) -> list[AlignGroup]:
        """The alignment groups (one PSI each) of the new rows in a prediction session, whose
        members are the parties that take part (default: none, :attr:`predicts_alone`)."""
        raise ConfigError(
            f"`fedviews predict` runs no {self.name} session: "
            + (self.predicts_alone or "its deployment does not predict new rows")
        )

    def predict_policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        """What may cross in a prediction session: what the algorithm's test phase sends."""
        raise NotImplementedError  # pragma: no cover - abstract

    def build_predictor(
        self, run: RunSpec, party: str, model: Mapping[str, np.ndarray], local: Local,
        setup: Mapping[str, Any],
    ) -> Party:  # fmt: skip  # pragma: no cover - abstract
        """``party``'s part of a prediction session: its fitted ``model`` (the arrays it kept,
        :meth:`party_results`), its new rows aligned (``local``) and the training ``setup``."""
        raise NotImplementedError

    def make_predictor(
        self, run: RunSpec, party: str, model: Mapping[str, np.ndarray], local: Local,
        setup: Mapping[str, Any],
    ) -> Party:  # fmt: skip
        """:meth:`build_predictor`, told who the members of its secure sums are (as
        :meth:`make_party`)."""
        return self._told_members(run, self.build_predictor(run, party, model, local, setup))

    def build_predict_coordinator(self, run: RunSpec, setup: Mapping[str, Any]) -> Coordinator:
        """The coordinator of a prediction session (default: one that only sends)."""
        return Coordinator(run.federation.coordinator)

    def run_prediction(self, run: RunSpec, coord: Coordinator) -> None:
        """Drive a prediction session (default: ``coord.predict()``)."""
        runner: Any = coord
        runner.predict()

    def predictions(self, party: Party) -> Prediction | None:
        """What ``party`` predicted in a prediction session (``None``: nothing, it is not
        where the predictions land)."""
        return None

    # -- leakage ---------------------------------------------------------------
    def audit_rounds(self, run: RunSpec) -> Collection[int] | None:
        """The rounds whose messages :meth:`observations` reads (``None``: all): an attacker's
        recording keeps only those, so an audit of a long run stays small."""
        return None

    def observations(
        self, run: RunSpec, setup: Mapping[str, Any], recording: Recording
    ) -> list[Observation]:
        """What ``recording`` (all that one party or the coordinator received) holds about
        other parties' labels or features, per sample, for the attacks of
        :mod:`fedviews.privacy.attacks`. Only the recording and public facts of the run
        (params, setup, roster) may be used. Default: nothing per-sample."""
        return []

    # -- demo data -------------------------------------------------------------
    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """Each party's data dealt from a built-in dataset, for ``fedviews launch`` and
        ``fedviews split-data`` (``cfg.data``: the ``[data]`` table of a deployment config).

        Default: one view per party, in order (``data.views``, default the party
        names), labels with the first label owner (see :func:`fedviews.data.deal_views`).
        """
        fed, split = cfg.federation, cfg.data
        views = tuple(split.views or fed.parties)
        if len(views) != len(fed.parties):
            raise ConfigError(f"data.views lists {len(views)} views for {len(fed.parties)} parties")
        owner = views[fed.parties.index(fed.owners()[0])]
        dealt = deal_views(
            split.dataset,
            views=views,
            label_owner=owner,
            n_per_class=split.n_per_class,
            overlap=split.overlap,
            n_test=split.n_test,
            seed=cfg.seed or 0,
        )
        return dict(zip(fed.parties, dealt.values(), strict=True))


#: the algorithm specs by name (the built-in ones register on first lookup)
ALGORITHMS: Registry[Algorithm] = Registry(
    "algorithm",
    (
        "fedviews.linear.mmvfl.spec",
        "fedviews.linear.vfedmv.spec",
        "fedviews.linear.hfedmv.spec",
        "fedviews.deep.sfedmv.spec",
        "fedviews.deep.multivfl.spec",
        "fedviews.deep.apfed.spec",
        "fedviews.deep.splitnn.spec",
    ),
)


def register_algorithm_spec(spec: Algorithm) -> Algorithm:
    """Make ``spec`` runnable (and deployable) under ``spec.name``; a second one is an error.

    Raises
    ------
    ConfigError
        ``spec`` is no :class:`Algorithm`, lacks ``name`` or ``Params``, or does not define
        :meth:`~Algorithm.policy`, :meth:`~Algorithm.build_party` and
        :meth:`~Algorithm.build_coordinator` (found here, not when a run first needs them).
    """
    kind = type(spec).__name__
    if not isinstance(spec, Algorithm):
        raise ConfigError(f"register_algorithm_spec takes an Algorithm instance, got {kind}")
    name = getattr(spec, "name", None)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{kind}: set the class attribute name = '<algorithm name>'")
    params = getattr(spec, "Params", None)
    if not isinstance(params, type):
        raise ConfigError(f"{kind} ({name!r}): set the class attribute Params (its params class)")
    if not dataclasses.is_dataclass(params) or not params.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise ConfigError(
            f"{kind} ({name!r}): Params ({params.__name__}) must be a frozen dataclass "
            "(@dataclass(frozen=True)): a run's params never change under it"
        )
    missing = [
        m
        for m in ("policy", "build_party", "build_coordinator")
        if getattr(type(spec), m) is getattr(Algorithm, m)
    ]
    if missing:
        raise ConfigError(
            f"{kind} ({name!r}) does not define {', '.join(missing)}: every algorithm defines "
            "policy, build_party and build_coordinator (docs/adding-an-algorithm.md)"
        )
    return ALGORITHMS.add(name, spec)


#: how an algorithm of one's own becomes known, in Python
OWN_ALGORITHM_HINT = " (one of your own: import the module that registers it first)"


def get_algorithm_spec(name: str, own_hint: str = OWN_ALGORITHM_HINT) -> Algorithm:
    """The spec registered under ``name`` (a :class:`ConfigError` naming the closest
    otherwise, then ``own_hint``: a config says to list the module in ``modules``)."""
    try:
        return ALGORITHMS.get(name)
    except ConfigError as exc:  # ("did you mean 'apfed'?" for "fedrige" not imported)
        raise ConfigError(f"{exc}{own_hint}") from None


#: the start of a round's progress line (see :meth:`Algorithm.progress`)
_ROUND = re.compile(r"^(round|epoch) (\d+)\b")


def of_planned(line: str, planned: int | None) -> str:
    """``line`` with its leading ``round k`` (or ``epoch k``) as ``round k/planned``."""
    if planned is None:
        return line
    return _ROUND.sub(rf"\1 \2/{planned}", line, count=1)
