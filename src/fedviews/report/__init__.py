"""Reports: matplotlib figures and the self-contained HTML report of a run."""

from fedviews.report._html import write_report
from fedviews.report._plots import line_panels

__all__ = ["line_panels", "write_report"]
