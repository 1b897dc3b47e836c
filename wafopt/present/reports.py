"""The text of the workload, TATP and simulation reports, written beside their computation."""

from wafopt.costmodel.report import render_report as workload_text
from wafopt.run.tatp_report import render as tatp_text
from wafopt.simulate.report import render_text as simulation_text

__all__ = ["simulation_text", "tatp_text", "workload_text"]
