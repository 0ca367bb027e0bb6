"""Presentation: result files, terminal tables and live view, HTML report. Recomputes nothing."""
