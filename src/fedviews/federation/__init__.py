"""Federation runtime: parties, messages, transports, privacy policy, message log.

An algorithm is defined once, as an :class:`Algorithm` spec: party-local handlers
plus a coordinator that drives rounds, its params, roles, alignment groups and
privacy policy; it never imports a concrete transport. :func:`build_in_process`
runs a spec in one process; :mod:`fedviews.deploy` runs the same spec with one
process per party. :func:`federate` wires a list of parties to a transport.
"""

import importlib
from typing import TYPE_CHECKING

from fedviews._params import Checked, check_params, spec
from fedviews.errors import require
from fedviews.federation._algorithm import (
    ALGORITHMS,
    Algorithm,
    Prediction,
    get_algorithm_spec,
    of_planned,
    register_algorithm_spec,
)
from fedviews.federation._certs import (
    TLSFiles,
    certificate_advice,
    check_name,
    crypto,
    init_ca,
    issue_certificate,
    revoke_certificate,
)
from fedviews.federation._codec import CODECS, Codec, wire_codecs
from fedviews.federation._defense import (
    DEFENSES,
    GAUSSIAN,
    RANDOMIZED,
    Defense,
    gaussian_epsilon,
    noise_multiplier,
    randomized_response,
)
from fedviews.federation._e2e import E2EKeys, Trust, check_bundle
from fedviews.federation._inprocess import InProcessRun, build_in_process
from fedviews.federation._lend import lend
from fedviews.federation._log import SUMMARY_KEYS, LogEntry, MessageLog, merge_summaries
from fedviews.federation._message import Header, Message, MetaValue
from fedviews.federation._meta import reported_count, reported_share, run_differences
from fedviews.federation._party import Coordinator, Party, handles
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._record import Observation, Observed, Recording
from fedviews.federation._reports import error_payload, raise_remote
from fedviews.federation._run import (
    AlignGroup,
    Local,
    Roster,
    RunSpec,
    estimator_params,
    member_entropy,
    spawn_streams,
)
from fedviews.federation._secagg import (
    SECAGG_KINDS,
    SecureSum,
    SecureSumParty,
    secure_sum_setup,
    secured_policy,
    unmask_sum,
)
from fedviews.federation._setup import (
    MemberSetup,
    SetupReport,
    agree_setup,
    check_group_sizes,
    check_tags,
    defend_local,
    privacy_ledger,
    run_privacy,
    setup_info,
)
from fedviews.federation._tensors import (
    Array,
    Backward,
    Blame,
    LargestSent,
    failed_on_huge_input,
    is_tensor,
    largest_input,
    numpy_dtype,
    to_host,
)
from fedviews.federation._transport import InProcessTransport, Transport, attributed, federate

if TYPE_CHECKING:
    from fedviews.federation._grpc_hub import GrpcHub
    from fedviews.federation._grpc_options import GrpcOptions
    from fedviews.federation._grpc_party import GrpcPartyTransport

__all__ = [
    "ALGORITHMS",
    "CODECS",
    "Checked",
    "Codec",
    "DEFENSES",
    "Defense",
    "GAUSSIAN",
    "RANDOMIZED",
    "defend_local",
    "gaussian_epsilon",
    "member_entropy",
    "noise_multiplier",
    "privacy_ledger",
    "randomized_response",
    "Algorithm",
    "AlignGroup",
    "InProcessRun",
    "Local",
    "MemberSetup",
    "agree_setup",
    "run_privacy",
    "Roster",
    "RunSpec",
    "SetupReport",
    "build_in_process",
    "check_params",
    "estimator_params",
    "check_group_sizes",
    "check_tags",
    "get_algorithm_spec",
    "of_planned",
    "register_algorithm_spec",
    "setup_info",
    "spawn_streams",
    "spec",
    "GrpcHub",
    "GrpcOptions",
    "GrpcPartyTransport",
    "Array",
    "Backward",
    "Blame",
    "largest_input",
    "failed_on_huge_input",
    "LargestSent",
    "MetaValue",
    "error_payload",
    "is_tensor",
    "numpy_dtype",
    "lend",
    "to_host",
    "raise_remote",
    "attributed",
    "TLSFiles",
    "E2EKeys",
    "Trust",
    "check_bundle",
    "certificate_advice",
    "crypto",
    "check_name",
    "init_ca",
    "issue_certificate",
    "revoke_certificate",
    "Coordinator",
    "SECAGG_KINDS",
    "SecureSum",
    "SecureSumParty",
    "secure_sum_setup",
    "secured_policy",
    "unmask_sum",
    "InProcessTransport",
    "LogEntry",
    "Header",
    "Message",
    "reported_count",
    "reported_share",
    "run_differences",
    "MessageLog",
    "merge_summaries",
    "SUMMARY_KEYS",
    "Party",
    "Prediction",
    "PrivacyPolicy",
    "Observation",
    "Observed",
    "Recording",
    "Transport",
    "federate",
    "handles",
    "wire_codecs",
]


#: the gRPC transport's public names, by the module that defines them
_GRPC = {
    "GrpcHub": "fedviews.federation._grpc_hub",
    "GrpcOptions": "fedviews.federation._grpc_options",
    "GrpcPartyTransport": "fedviews.federation._grpc_party",
}


def __getattr__(name: str) -> object:
    """The gRPC transports load lazily: they need the ``grpc`` extra."""
    module = _GRPC.get(name)
    if module is not None:
        require("grpc", "grpc")
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'fedviews.federation' has no attribute {name!r}")
