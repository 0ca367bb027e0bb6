"""``python -m plateau_bench`` is the ``plateau`` command."""

from plateau_bench.cli import main

main()
