"""Seeded differential torture run: random systems, ranks, models and paths vs one process.

    python benchmarks/torture.py --cases 200 --seed 0
        [--paths replicated,trajectory,ase,gloo,graph] [--timeout 30] [--keep-going] [--verbose]

Runs the cases of seeds S .. S+N-1 (tests/torture/cases.py), each through its path
(tests/torture/paths.py) under a hard timeout, and prints a table per family and per path
(cases, passed, failed, skipped, wall time). Exits 1 at the first mismatch, error or hang,
printing the case line, the error, a diagnosis and the one-line reproduction command;
with --keep-going it runs every case and lists all failures at the end.
"""

from __future__ import annotations

import argparse
import collections
import logging
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.torture.cases import PATHS, draw_case
from tests.torture.paths import TIMEOUT_S, Outcome, diagnose, run_case
from tests.torture.zoo import OPS


def _table(title: str, outcomes: list[Outcome], key: str) -> str:
    """Cases, passed, failed, skipped and wall seconds grouped by `key` of the case."""
    rows: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0, 0, 0, 0.0])
    for outcome in outcomes:
        row = rows[str(getattr(outcome.case, key))]
        row[0] += 1
        row[1 if outcome.status == "pass" else 3 if outcome.status == "skip" else 2] += 1
        row[4] += outcome.seconds
    lines = [f"{title:<18}{'cases':>7}{'pass':>7}{'fail':>7}{'skip':>7}{'wall s':>9}"]
    for name, (n, ok, bad, skip, wall) in sorted(rows.items()):
        lines.append(f"{name:<18}{n:>7}{ok:>7}{bad:>7}{skip:>7}{wall:>9.1f}")
    return "\n".join(lines)


def _headline(outcome: Outcome) -> str:
    """The error on one line: the last exception line of the detail, or its first line."""
    lines = [line.strip() for line in outcome.detail.splitlines() if line.strip()]
    raised = [line for line in lines if line.split(":")[0].endswith(("Error", "Exception"))]
    return (raised[-1] if raised else lines[0] if lines else outcome.status)[:300]


def _op_coverage(outcomes: list[Outcome]) -> str:
    models = [o.case.model for o in outcomes if o.case.model.kind == "mpnn"]
    counts = collections.Counter(op for model in models for op in model.ops)
    missing = [op for op in OPS if op not in counts]
    listed = f" (not drawn: {', '.join(missing)})" if 0 < len(missing) <= 8 else ""
    return f"aggregation ops covered: {len(OPS) - len(missing)}/{len(OPS)}{listed}"


def main() -> int:
    """Run the torture cases; 0 when every case passed or was skipped."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=50, help="number of cases")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first case")
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated paths")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per case")
    parser.add_argument("--keep-going", action="store_true", help="do not stop at a failure")
    parser.add_argument("--verbose", action="store_true", help="print every case")
    args = parser.parse_args()
    paths = tuple(p.strip() for p in args.paths.split(","))
    unknown = set(paths) - set(PATHS)
    if unknown:
        parser.error(f"unknown paths {sorted(unknown)}; known: {', '.join(PATHS)}")
    logging.getLogger("nvdd_plugins").setLevel(logging.CRITICAL)  # ranks log their failures
    logging.getLogger("torch.multiprocessing").setLevel(logging.ERROR)
    warnings.simplefilter("ignore", (UserWarning, DeprecationWarning))
    start = time.perf_counter()
    outcomes: list[Outcome] = []
    for seed in range(args.seed, args.seed + args.cases):
        case = draw_case(seed, paths)
        if args.verbose:
            print(f"... {case.line()}", flush=True)
        outcome = run_case(case, args.timeout)
        outcomes.append(outcome)
        if args.verbose:
            deviations = " ".join(f"{k}={v:.1e}" for k, v in outcome.deviations.items())
            print(f"    {outcome.status} in {outcome.seconds:.2f} s {deviations} {outcome.info}")
        if not outcome.ok and not args.keep_going:
            print(outcome.report())
            print(f"stopped at the first failure, case {len(outcomes)} of {args.cases}")
            return 1
        if not outcome.ok:
            brief = f"FAIL seed {seed} ({case.path}): {_headline(outcome)} [{diagnose(outcome)}]"
            print(outcome.report() if args.verbose else brief, flush=True)
    wall = time.perf_counter() - start
    print(_table("family", outcomes, "family"))
    print(_table("path", outcomes, "path"))
    print(_table("world size", outcomes, "world_size"))
    print(_op_coverage(outcomes))
    failed = [o for o in outcomes if not o.ok]
    print(f"{len(outcomes)} cases, {len(failed)} failed, {wall:.1f} s wall")
    for outcome in failed:
        print(f"  seed {outcome.case.seed}: {outcome.status}: {_headline(outcome)}")
        print(f"      {diagnose(outcome)}; reproduce: {outcome.case.command()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
