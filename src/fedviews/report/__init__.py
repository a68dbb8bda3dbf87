"""Reports: matplotlib figures, the self-contained HTML report of a run, JSON values."""

from fedviews.report._html import ReportConfig, ReportResult, ReportTable, write_report
from fedviews.report._json import to_jsonable
from fedviews.report._plots import line_panels

__all__ = [
    "ReportConfig",
    "ReportResult",
    "ReportTable",
    "line_panels",
    "to_jsonable",
    "write_report",
]
