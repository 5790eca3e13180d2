"""``python -m analysis``: the ``fixedid-analyze`` command line."""

from analysis.cli.main import main

main()
