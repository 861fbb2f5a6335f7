"""Issue 22 side by side: nvdd (cpu_lj_step.py) against nvalchemi-toolkit (peer_lj_step.py).

    OMP_NUM_THREADS=1 python benchmarks/cpu_vs_peer.py                 # the issue's 8 rows
    PEER_PYTHON=/path/to/venv/bin/python python benchmarks/cpu_vs_peer.py --reps 3 --json out.json

nvdd runs two ways: under `DomainParallel` ("dd", one process per rank) and, at one rank,
"plain": the integrator without `DomainParallel` (`cpu_lj_step.py --plain`,
`NVE(model).run(batch, n)`, the path a user takes first). All jobs run in fresh processes,
interleaved (dd, plain, peer, dd, plain, peer, ... `--reps` times per rank count; each process
times every atoms × skin case, `--rounds` blocks of `--steps` steps after `--warmup`), and the
table gives the median over the repetitions of each process's median steps/s, with the
ratios dd / peer, plain / peer (> 1: nvdd faster) and plain / dd. Two ranks run under
`python -m torch.distributed.run --standalone --nproc_per_node=2`. Before timing, both
report the total energy after 1 and after `--check` steps of the same initial state
(2,048 atoms, skin 0, per rank count) and the table notes their relative difference.
`--cold N` adds the cold-start row: the whole process wall of a short run (`--cold-atoms`,
skin 0, `--cold-ranks` ranks, N steps) with every compile cache empty (nvdd's native-kernel
cache `NVDD_CACHE_DIR`, Warp's `WARP_CACHE_PATH`, Inductor's `TORCHINDUCTOR_CACHE_DIR`, each a
new temporary folder), interleaved like the warm runs.

nvdd runs with `NVDD_PYTHON` (default: this interpreter), the peer with `PEER_PYTHON` (default
/tmp/peer/bin/python, a scratch venv with `pip install torch==2.13.0 nvalchemi-toolkit==0.2.0`;
not a dependency of this repo). Without the peer the nvdd columns alone are printed. nvdd is
imported from this checkout (PYTHONPATH), whatever the venv has installed.
Uses only the standard library, so any Python runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = {
    "dd": HERE / "cpu_lj_step.py",
    "plain": HERE / "cpu_lj_step.py",
    "peer": HERE / "peer_lj_step.py",
}
OPTIONS = {"plain": ["--plain"]}  # the script's own options per code
CHECK = re.compile(r"CHECK atoms (\d+) skin (\S+) step +(\d+) .* E_tot (\S+)")


def command(python: str, ranks: int, script: Path, args: list[str]) -> list[str]:
    launcher = [python]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    return [*launcher, str(script), *args]


def run(python: str, ranks: int, which: str, args: list[str], env_extra: dict | None = None) -> str:
    """Run one fresh process (group); its stdout. Raises with its output on failure."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", **(env_extra or {}))
    if which != "peer":  # this checkout's nvdd, not whichever one the venv has installed
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    cmd = command(python, ranks, SCRIPTS[which], [*OPTIONS.get(which, []), *args])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=HERE)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise RuntimeError(f"{which} ({ranks} ranks) failed: {' '.join(cmd)}\n{tail}")
    return done.stdout


def timed(python: str, ranks: int, which: str, options: argparse.Namespace) -> dict:
    """{(atoms, skin): steps/s} of one fresh process (group)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        args = ["--atoms", *map(str, options.atoms), "--skin", *map(str, options.skin)]
        args += ["--steps", str(options.steps), "--rounds", str(options.rounds)]
        args += ["--warmup", str(options.warmup), "--json", str(out)]
        run(python, ranks, which, args)
        rows = json.loads(out.read_text())["rows"]
    return {(row["atoms"], row["skin"]): row["steps_per_s"] for row in rows}


def cold_wall(python: str, which: str, options: argparse.Namespace) -> float:
    """Seconds of one fresh process (group) running `options.cold` steps with empty caches."""
    args = ["--atoms", str(options.cold_atoms), "--skin", "0", "--steps", str(options.cold)]
    args += ["--rounds", "1", "--warmup", "0"]
    with tempfile.TemporaryDirectory() as tmp:
        caches = {
            name: str(Path(tmp) / name)
            for name in ("NVDD_CACHE_DIR", "WARP_CACHE_PATH", "TORCHINDUCTOR_CACHE_DIR")
        }
        start = time.perf_counter()
        run(python, options.cold_ranks, which, args, caches)
        return time.perf_counter() - start


def energies(python: str, ranks: int, which: str, steps: int) -> dict:
    """{step: E_tot} after 1 and `steps` steps, 2,048 atoms, skin 0."""
    args = ["--atoms", "2048", "--skin", "0", "--check", str(steps)]
    text = run(python, ranks, which, args)
    return {int(m[3]): float(m[4]) for m in CHECK.finditer(text)}


def runs_at(code: str, ranks: int) -> bool:
    """Whether `code` has a row at `ranks` (plain runs one process)."""
    return code != "plain" or ranks == 1


def ratio_columns(codes: list[str]) -> list[tuple[str, str]]:
    """(numerator, denominator) of each ratio column the codes present allow."""
    pairs = [("dd", "peer"), ("plain", "peer"), ("plain", "dd")]
    return [(a, b) for a, b in pairs if a in codes and b in codes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--atoms", type=int, nargs="+", default=[2048, 4000])
    parser.add_argument("--skin", type=float, nargs="+", default=[0.0, 1.0], help="Å")
    parser.add_argument("--reps", type=int, default=3, help="fresh processes per code")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=5, help="timed blocks per case")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--check", type=int, default=20, help="energy check steps (0: none)")
    parser.add_argument("--cold", type=int, default=0, help="cold-start steps (0: no cold row)")
    parser.add_argument("--cold-atoms", type=int, default=256)
    parser.add_argument("--cold-ranks", type=int, default=2)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--no-plain", action="store_true", help="leave out the plain rows")
    options = parser.parse_args()
    nvdd = os.environ.get("NVDD_PYTHON", sys.executable)
    pythons = {"dd": nvdd} if options.no_plain else {"dd": nvdd, "plain": nvdd}
    peer = os.environ.get("PEER_PYTHON", "/tmp/peer/bin/python")
    if Path(peer).exists():
        pythons["peer"] = peer
    else:
        print(f"# peer skipped: no {peer} (set PEER_PYTHON to a venv with nvalchemi-toolkit)")
    codes = list(pythons)

    checks = {}
    if options.check > 1:
        for ranks in options.ranks:
            found = {
                code: energies(pythons[code], ranks, code, options.check)
                for code in codes
                if runs_at(code, ranks)
            }
            checks[ranks] = found
            for code, values in found.items():
                print(
                    f"# {ranks} rank(s) {code}: E_tot step 1 {values[1]:.13f} eV, "
                    f"step {options.check} {values[options.check]:.13f} eV"
                )
            for other in ("plain", "peer"):
                if other in found:
                    a, b = found["dd"][options.check], found[other][options.check]
                    print(
                        f"# {ranks} rank(s) dd vs {other}: |dE_tot| {abs(a - b):.2e} eV, "
                        f"relative {abs(a - b) / abs(b):.2e}"
                    )

    cold: dict[str, list[float]] = {}
    for rep in range(options.reps if options.cold else 0):
        for code in (code for code in codes if code != "plain"):
            cold.setdefault(code, []).append(cold_wall(pythons[code], code, options))
        print(f"# done: cold start, repetition {rep + 1}", flush=True)

    samples: dict[tuple, list[float]] = {}
    for ranks in options.ranks:
        for rep in range(options.reps):
            for code in (code for code in codes if runs_at(code, ranks)):
                for (atoms, skin), rate in timed(pythons[code], ranks, code, options).items():
                    samples.setdefault((code, ranks, atoms, skin), []).append(rate)
                print(f"# done: {code}, {ranks} rank(s), repetition {rep + 1}", flush=True)

    print(
        f"\n# Ar LJ NVE warm steps/s, medians of {options.reps} fresh processes, float64, "
        "1 thread per rank"
    )
    ratios = ratio_columns(codes)
    header = f"{'ranks':>5} {'atoms':>6} {'skin[Å]':>7}" + "".join(f" {c:>8}" for c in codes)
    print(header + "".join(f" {f'{a}/{b}':>10}" for a, b in ratios))
    rows = []
    for ranks, atoms, skin in sorted({key[1:] for key in samples}):
        row: dict = {"ranks": ranks, "atoms": atoms, "skin": skin}
        line = f"{ranks:5d} {atoms:6d} {skin:7.2f}"
        for code in codes:
            rates = samples.get((code, ranks, atoms, skin))
            row[code] = statistics.median(rates) if rates else None
            line += f" {row[code]:8.2f}" if rates else f" {'-':>8}"
        for a, b in ratios:
            value = row[a] / row[b] if row[a] and row[b] else None
            row[f"{a}/{b}"] = value
            line += f" {value:10.2f}" if value else f" {'-':>10}"
        rows.append(row)
        print(line)
    if cold:
        walls = {code: statistics.median(values) for code, values in cold.items()}
        line = f"\n# cold start, {options.cold_atoms} atoms, {options.cold_ranks} ranks, "
        line += f"{options.cold} steps, process wall [s]: dd {walls['dd']:.1f}"
        if "peer" in walls:
            line += f", peer {walls['peer']:.1f}, dd / peer {walls['dd'] / walls['peer']:.2f}"
        print(line)
    if options.json:
        Path(options.json).write_text(
            json.dumps(
                {
                    "args": vars(options),
                    "rows": rows,
                    "energy_checks": checks,
                    "cold_walls": cold,
                    "samples": {"/".join(map(str, k)): v for k, v in samples.items()},
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
