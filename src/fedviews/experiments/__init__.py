"""Experiments: TOML configs, the registry of algorithms/protocols, and the runner."""

from fedviews.experiments._config import DataConfig, ExperimentConfig, build_dataclass, load_config
from fedviews.experiments._registry import (
    ExperimentSpec,
    get_algorithm,
    get_experiment,
    list_algorithms,
    list_experiments,
    register_algorithm,
    register_experiment,
)
from fedviews.experiments._reproduce import (
    Reproduction,
    find_manifest,
    load_manifest,
    read_results,
    reproduce,
    select_entries,
)
from fedviews.experiments._reproduce_cli import reproduce_entries, reproduction_table
from fedviews.experiments._runner import (
    ExperimentResult,
    RunContext,
    Table,
    resume_experiment,
    run_experiment,
)
from fedviews.experiments._sessions import committed_cells

__all__ = [
    "DataConfig",
    "ExperimentConfig",
    "ExperimentResult",
    "ExperimentSpec",
    "Reproduction",
    "RunContext",
    "Table",
    "build_dataclass",
    "committed_cells",
    "find_manifest",
    "get_algorithm",
    "get_experiment",
    "list_algorithms",
    "list_experiments",
    "load_config",
    "load_manifest",
    "read_results",
    "register_algorithm",
    "register_experiment",
    "reproduce",
    "reproduce_entries",
    "reproduction_table",
    "resume_experiment",
    "run_experiment",
    "select_entries",
]
