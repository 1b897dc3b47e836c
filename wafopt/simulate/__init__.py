"""Discrete-event simulation of one training iteration of a plan, and its calibration against
the analytic model (docs/simulate.md, docs/calibration.md)."""
