"""The ``plateau`` command (commands only: parse, call, print)."""

from __future__ import annotations


def main() -> None:
    raise SystemExit("plateau: CLI under construction")
