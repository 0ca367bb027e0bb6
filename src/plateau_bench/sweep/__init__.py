"""Orchestration: what to measure next (``plan``), the loop that measures it (``loop``), and the
wiring of target, workload, runner and result files (``session``).

The only layer that sees every other one; commands call it, nothing below imports it.
"""
