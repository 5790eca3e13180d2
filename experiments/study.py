"""``python -m experiments.study`` is ``fixedid-study`` (:mod:`analysis.cli.study`), kept for source checkouts."""

from analysis.cli.study import main

if __name__ == "__main__":
    main()
