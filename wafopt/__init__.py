"""wafopt: exact and heuristic optimization of LLM training layouts on wafer-scale chips."""

__version__ = "0.1.0"
