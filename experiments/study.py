"""The study pipeline (see analysis.study.pipeline): train the three variants and their controls for every seed (and
further GF(2) recodings), measure every checkpoint with every analysis, and write a report in which every number has
a mean and a 95% interval over seeds, and which says which differences survive each control.

    python -m experiments.study --config tiny --seeds 0-4 --gf2-seeds 0,1,2 --out study/   # the documented run
    python -m experiments.study --config tiny --seeds 0-2 --variants learned,canonical,gf2 --out quick/  # no controls
    python -m experiments.study --config tiny --seeds 0-4 --out study/ --workers 4   # 4 local worker processes
    python -m experiments.study --config small --seeds 0-4 --out /shared/study --worker  # one of N (Slurm array)
    fixedid-analyze figures --results study/     # redraw every figure from the CSVs, no model needed
"""

from analysis.study.pipeline import main

if __name__ == "__main__":
    main()
