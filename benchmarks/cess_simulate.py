"""CESS controlled experiments (paper Table 5, appendix A.3 and A.4) at the paper's sizes.

Run: ``python benchmarks/cess_simulate.py [--seeds 0 1 2]`` from the checkout. For each seed it
prints the tables of ``draligned cess simulate`` and the wall-clock time.
"""

from __future__ import annotations

import argparse

from draligned.cess.experiments import simulate
from draligned.cli.cess import simulation_text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = ap.parse_args()
    for seed in args.seeds:
        print(simulation_text(simulate(seed=seed)))
        print()


if __name__ == "__main__":
    main()
