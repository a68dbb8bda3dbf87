"""Reports: matplotlib figures, the self-contained HTML report of a run, run comparison."""

from fedviews.report._compare import Comparison, compare_runs
from fedviews.report._figures import line_panels, pyplot, save_figure
from fedviews.report._format import format_config, format_value
from fedviews.report._html import run_summary, write_report
from fedviews.report._json import to_jsonable
from fedviews.report._names import METHOD_NAMES, method_name
from fedviews.report._run import RunRecord, load_run

__all__ = [
    "METHOD_NAMES",
    "Comparison",
    "RunRecord",
    "compare_runs",
    "format_config",
    "format_value",
    "line_panels",
    "load_run",
    "method_name",
    "pyplot",
    "run_summary",
    "save_figure",
    "to_jsonable",
    "write_report",
]
