"""The study pipeline (see analysis.study.pipeline): train the three variants for every seed (and further GF(2) recodings),
measure every checkpoint with every analysis, and write a report in which every number has a mean and a 95% interval
over seeds.

    python -m experiments.study --config experiments/configs/tiny.toml --seeds 0,1,2 --out study/
    python -m experiments.study --config tiny --seeds 0-2 --gf2-seeds 0,1,2 --out study/   # three trained recodings
    fixedid-analyze figures --results study/     # redraw every figure from the CSVs, no model needed
"""

from analysis.study.pipeline import main

if __name__ == "__main__":
    main()
