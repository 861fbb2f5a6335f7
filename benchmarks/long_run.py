"""A long hot-gas run on 4 simulated ranks (10^4 steps by default): ownership, ghost-shell
completeness and conservation checked every 50 steps; prints the migrations and wall time.

    python benchmarks/long_run.py [--steps 10000] [--ranks 4]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.parallel.test_invariants import long_hot_gas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--ranks", type=int, default=4)
    args = parser.parse_args()
    start = time.perf_counter()
    checks, migrated = long_hot_gas(args.steps, args.ranks)
    elapsed = time.perf_counter() - start
    print(
        f"{args.steps} steps at {args.ranks} ranks: invariants held at {checks} checks, "
        f"{migrated} migrations, {elapsed:.0f} s"
    )


if __name__ == "__main__":
    main()
