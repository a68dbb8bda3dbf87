"""The set-up of a run, step by step: the one path of an in-process run and a deployment.

Every member of a run (each party, and the coordinator where it holds data) takes the
same steps wherever it runs (:class:`MemberSetup`):

1. :meth:`~fedviews.federation.Algorithm.check_data` on its own data, before anything
   else (a deployed party checks it before it connects);
2. after the alignment of its IDs (in the clear in one process, by PSI in a deployment),
   its :class:`~fedviews.federation.Local` under the run's defense (:func:`defend_local`,
   with its private draw in a deployment) and its report (:func:`setup_info`: scalars,
   never data);
3. the coordinator checks the reports (:class:`SetupReport` in a deployment) and that
   every alignment group's members hold as many samples, merges them
   (:meth:`~fedviews.federation.Algorithm.make_setup`) and derives the run's privacy
   policy (:func:`agree_setup`);
4. every party builds its part from its defended data and the setup
   (:meth:`~fedviews.federation.Algorithm.make_party`).

:func:`build_in_process` runs them for every member in one loop (:func:`set_up_members`);
a deployment runs each member's steps in its own process (``fedviews.deploy``); both
account the privacy of the run alike (:func:`run_privacy`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedviews.data import PartyData, align
from fedviews.errors import DataError, ProtocolError
from fedviews.federation._algorithm import Algorithm
from fedviews.federation._defense import (
    GAUSSIAN,
    gaussian_epsilon,
    noise_multiplier,
    randomized_response,
)
from fedviews.federation._party import Party
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._run import AlignGroup, Local, RunSpec, member_entropy


def defend_local(run: RunSpec, member: str, local: Local, entropy: int | None = None) -> Local:
    """What ``member`` builds its part from under the run's defense: with ``label_rr``, its
    own data with its training labels randomized once (``entropy``: its private draw;
    ``None``: ``defense.seed``, else derived from the run's seed, for simulations)."""
    d = run.defense
    data = local.data
    if d.kind != "label_rr" or data.y is None:
        return local
    if len(np.unique(data.y)) < 2:  # randomized response over one class is no randomization
        raise DataError(
            f"{member!r} holds labels of one class only: label_rr randomizes over the classes "
            "a holder has, so its labels would go out unchanged; deal it two or more classes"
        )
    rng = np.random.default_rng(member_entropy(run, member, entropy))
    y = randomized_response(data.y, float(d.epsilon), rng)
    return dataclasses.replace(local, data=dataclasses.replace(data, y=y))


def setup_info(algo: Algorithm, run: RunSpec, party: str, local: Local) -> dict[str, Any]:
    """What a party reports at setup: its aligned sample count per group, then its own info."""
    return {
        **{f"n/{g}": len(r) for g, r in local.rows.items()},
        **algo.party_info(run, party, local),
    }


class SetupReport(Mapping[str, Any]):
    """What ``party`` reported at setup (:func:`setup_info`), as the coordinator reads it:
    checked once, here, before anything uses it.

    Every value is text where the algorithms report text (:attr:`TEXT`) and a whole
    number >= 0 everywhere else (no bool, no float: a NaN, an infinity or 10.5 samples
    are refused); a key that is read but was not reported is refused too. Either way a
    :class:`ProtocolError` names ``party``.
    """

    #: the keys whose values are text (a view layout, a list of checkpointed rounds, the
    #: training run of a predicting party's model part); also every ``ids/<group>`` (a
    #: digest of the group's IDs, without the PSI)
    TEXT = ("view_dims", "checkpoints", "model_run")

    def __init__(self, party: str, info: Mapping[str, Any]) -> None:
        self.party = party
        for k, v in info.items():
            text = k in self.TEXT or k.startswith("ids/")
            if not (isinstance(v, str) if text else type(v) is int and v >= 0):
                raise ProtocolError(
                    f"{party!r} reported {k} = {v!r} at setup, expected "
                    + ("text" if text else "a whole number >= 0"),
                    party=party,
                )
        self._info = dict(info)

    def __getitem__(self, key: str) -> Any:
        if key not in self._info:
            raise ProtocolError(f"{self.party!r} reported no {key!r} at setup", party=self.party)
        return self._info[key]

    def __contains__(self, key: object) -> bool:
        return key in self._info

    def get(self, key: str, default: Any = None) -> Any:
        return self._info.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._info)

    def __len__(self) -> int:
        return len(self._info)


def check_tags(name: str, data: PartyData, groups: Mapping[str, AlignGroup]) -> None:
    """A member's row tags (:attr:`PartyData.group`) name training groups it is in (a
    DataError naming it otherwise)."""
    if data.group is None:
        return
    known = sorted(g for g, group in groups.items() if group.split == "train")
    stray = sorted(set(data.group.tolist()) - set(known))
    if stray:
        raise DataError(
            f"{name!r} tags rows with the groups {stray[:5]}, which it is not in; its training "
            f"groups are {known} (the file's `group` names each row's group)"
        )


def check_group_sizes(
    groups: Sequence[AlignGroup],
    infos: Mapping[str, Mapping[str, Any]],
    *,
    same_ids: bool = False,
) -> None:
    """Every member of a group must hold the same, non-zero number of aligned samples;
    with ``same_ids`` (a run without the PSI, whose members sort the IDs they hold) the
    same IDs too, as the digests they reported (``ids/<group>``) show."""
    hint = " (with alignment = 'none' they must hold the same IDs)" if same_ids else ""
    for g in groups:
        sizes = {p: int(infos[p][f"n/{g.name}"]) for p in g.parties}
        if len(set(sizes.values())) != 1:
            odd = _odd_one(sizes)
            raise _named(
                odd,
                DataError(
                    f"the parties of alignment group {g.name!r} hold different numbers of "
                    f"aligned samples: {sizes}{hint}"
                    + (f"; {odd!r} differs from all the others" if odd else "")
                ),
            )
        if not next(iter(sizes.values())):
            raise DataError(
                f"the parties of alignment group {g.name!r} share no sample ID (check that "
                "their files' IDs match: 7 and '7', or 'id7' and '7', differ)"
            )
        if same_ids:
            digests: dict[str, list[str]] = {}
            for p in g.parties:
                digests.setdefault(str(infos[p][f"ids/{g.name}"]), []).append(p)
            if len(digests) > 1:
                alike = "; ".join(", ".join(ps) for ps in digests.values())
                odd = _odd_one({p: d for d, ps in digests.items() for p in ps})
                raise _named(
                    odd,
                    DataError(
                        f"the parties of alignment group {g.name!r} hold as many samples but not "
                        f"the same IDs (alignment = 'none' matches rows by sorting the IDs); those "
                        f"that agree: {alike}. Align the files (or tag a party's rows with their "
                        "group: a `group` column) or use alignment = 'psi' (not on Flower)"
                        + (f"; {odd!r} differs from all the others" if odd else "")
                    ),
                )


def _odd_one(values: Mapping[str, Any]) -> str | None:
    """The one party whose value differs where every other party (two at least) reports the
    same: named for it, a majority being all a coordinator can go by (each value is what its
    party says); None otherwise."""
    if len(values) < 3:
        return None
    (common, n), *_ = Counter(values.values()).most_common()
    odd = [p for p, v in values.items() if v != common]
    return odd[0] if n == len(values) - 1 and len(odd) == 1 else None


def _named(party: str | None, err: DataError) -> DataError:
    err.party = party
    return err


def privacy_ledger(
    run: RunSpec, label_holders: list[str], n_classes: int, releases: int = 1
) -> dict[str, Any]:
    """The privacy spent by the run's defense, per party: ``{"mechanism", "parties":
    {party: {"epsilon", "delta", "accountant", ...}}}``; empty without a DP defense.

    Randomized response is composed with dp-accounting's PLD accountant (replace-one
    neighbours: one label changed) where it is installed, and otherwise given in closed
    form (the two agree: a test checks it). ``grad_dp`` composes ``releases`` Gaussian
    mechanisms (the algorithm's :meth:`~fedviews.federation.Algorithm.dp_releases`) with
    the same accountant."""
    d = run.defense
    if d.kind in GAUSSIAN:
        z = noise_multiplier(d, releases)
        entry = {
            "epsilon": gaussian_epsilon(z, releases, d.delta),
            "delta": float(d.delta),
            "accountant": "dp-accounting analytic Gaussian",
            "noise_multiplier": z,
            "clip": float(d.clip),
            "releases": int(releases),
        }
        if d.kind == "act_dp":  # the feature holders: every party that is no label owner
            owners = set(run.federation.owners())
            feature_holders = [p for p in run.federation.parties if p not in owners]
            return {
                "mechanism": "act_dp: clipped, Gaussian-noised activations and DP-SGD bottoms "
                "(feature DP)",
                "parties": {p: dict(entry, grad_clip=float(d.grad_clip)) for p in feature_holders},
            }
        mechanism = {
            "grad_dp": "grad_dp: per-sample clipped, Gaussian-noised label gradients (label DP)",
            "model_dp": "model_dp: clipped, Gaussian-noised model updates (client-level DP of "
            "each client's whole dataset)",
        }[d.kind]
        return {"mechanism": mechanism, "parties": {p: dict(entry) for p in label_holders}}
    if d.kind != "label_rr":
        return {}
    eps, how = float(d.epsilon), "closed form (randomized response, one draw)"
    if n_classes >= 2:
        try:
            import dp_accounting
            from dp_accounting.pld import pld_privacy_accountant as pld

            p = n_classes / (math.exp(eps) + n_classes - 1)  # dp-accounting's parameter
            acc = pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
            acc.compose(dp_accounting.RandomizedResponseDpEvent(p, n_classes))
            eps, how = float(acc.get_epsilon(0.0)), "dp-accounting PLD"
        except ImportError:
            pass
        except Exception as exc:  # pragma: no cover - an accountant that refuses: say so
            raise DataError(f"the privacy accountant failed: {exc}") from None
    return {
        "mechanism": "label_rr: randomized response on the training labels (label DP)",
        "parties": {p: {"epsilon": eps, "delta": 0.0, "accountant": how} for p in label_holders},
    }


def label_holders(run: RunSpec, members: Collection[str]) -> list[str]:
    """The members of a run that hold training labels: the roster's label owners that take
    part with data (``members``: the parties, and the coordinator where it holds data), in
    roster order (the parties, then the coordinator).

    The roster, not the data, decides: step 1 (``check_data``) refuses a label owner
    without labels and labels held by anyone else, so the two agree wherever the run gets
    that far, and the coordinator of a deployment, which never sees a party's data, counts
    the holders as an in-process run does.
    """
    owners = set(run.federation.owners())
    order = [*run.federation.parties, run.federation.coordinator]
    return [m for m in order if m in owners and m in members]


def run_privacy(
    algo: Algorithm, run: RunSpec, members: Collection[str], setup: Mapping[str, Any]
) -> dict[str, Any]:
    """The privacy the run's defense spends, per label (or feature) holder
    (:func:`privacy_ledger` of :func:`label_holders`)."""
    holders = label_holders(run, members)
    return privacy_ledger(run, holders, int(setup.get("n_classes", 0)), algo.dp_releases(run))


class MemberSetup:
    """One member's steps of the set-up (the module docstring), wherever it runs.

    Parameters
    ----------
    algo : Algorithm
        The run's algorithm.
    run : RunSpec
        The run (a deployment config is one).
    name : str
        The member: a party, or the coordinator where it holds data.
    data : PartyData
        Its own data; checked at once (step 1).
    """

    def __init__(self, algo: Algorithm, run: RunSpec, name: str, data: PartyData) -> None:
        algo.check_data(run, name, data)
        self.algo, self.run, self.name, self.data = algo, run, name, data
        #: its own data after alignment (the true labels: an experimenter's answer key)
        self.local: Local | None = None
        #: what it builds from: :attr:`local` under the run's defense
        self.defended: Local | None = None
        #: its private draw for the defense (a deployed label owner's), else ``None``
        self.entropy: int | None = None

    def report(
        self,
        rows: Mapping[str, np.ndarray],
        groups: Mapping[str, AlignGroup],
        entropy: int | None = None,
    ) -> dict[str, Any]:
        """Step 2: its aligned data (``rows[group]``: its positions in each group it is in)
        under the run's defense, drawn from ``entropy``; what it reports to the coordinator."""
        self.local = Local(self.data, rows, groups)
        self.entropy = entropy
        self.defended = defend_local(self.run, self.name, self.local, entropy)
        return setup_info(self.algo, self.run, self.name, self.defended)

    def build(self, setup: Mapping[str, Any]) -> Party:
        """Step 4: its party object, from its defended data and the setup (its defense draws
        from its private :attr:`entropy` where it has one)."""
        if self.defended is None:
            raise ProtocolError(f"{self.name!r} was asked to build its part before its setup")
        run = self.run
        if self.entropy is not None:
            run = dataclasses.replace(
                run, defense=dataclasses.replace(run.defense, seed=self.entropy)
            )
        return self.algo.make_party(run, self.name, self.defended, setup)


def agree_setup(
    algo: Algorithm,
    run: RunSpec,
    infos: Mapping[str, Mapping[str, Any]],
    *,
    same_ids: bool = False,
) -> tuple[dict[str, Any], PrivacyPolicy]:
    """Step 3, at the coordinator: ``(setup, policy)`` of the run from every member's report
    (``same_ids``: the members of a group must report the same IDs' digest,
    :func:`check_group_sizes`)."""
    check_group_sizes(algo.groups(run), infos, same_ids=same_ids)
    setup = algo.make_setup(run, infos)
    return setup, algo.policy(run, setup)


@dataclass
class SetUp:
    """The set-up of every member of a run in one process (:func:`set_up_members`)."""

    members: dict[str, MemberSetup]
    setup: dict[str, Any]
    policy: PrivacyPolicy
    #: every party's built part, by name (the coordinator is built by the caller)
    parties: dict[str, Party]


def set_up_members(algo: Algorithm, run: RunSpec, datas: Mapping[str, PartyData]) -> SetUp:
    """Steps 1-4 for every member of ``run`` holding ``datas`` (the parties, and the
    coordinator where it is given data), their IDs aligned in the clear (the rows and
    order a PSI gives)."""
    parties = list(run.federation.parties)
    missing = set(parties) - set(datas)
    if missing:
        raise DataError(f"no data for the parties {sorted(missing)}")
    coordinator = run.federation.coordinator
    names = parties + ([coordinator] if coordinator in datas else [])
    groups = algo.groups(run)
    for p in names:
        check_tags(p, datas[p], {g.name: g for g in groups if p in g.parties})
    rows: dict[str, dict[str, np.ndarray]] = {p: {} for p in names}
    for g in groups:
        offered = [datas[p].offered(g.name, g.split) for p in g.parties]
        pos = align(
            *[datas[p].split(g.split)[0][o] for p, o in zip(g.parties, offered, strict=True)]
        )
        for p, o, at in zip(g.parties, offered, pos, strict=True):
            rows[p][g.name] = o[at]
    by_name = {g.name: g for g in groups}
    members = {p: MemberSetup(algo, run, p, datas[p]) for p in names}
    infos = {p: m.report(rows[p], {g: by_name[g] for g in rows[p]}) for p, m in members.items()}
    setup, policy = agree_setup(algo, run, infos)
    built = {p: members[p].build(setup) for p in parties}
    return SetUp(members, setup, policy, built)
