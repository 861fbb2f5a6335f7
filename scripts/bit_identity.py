"""Bit-identity check: dump every output of a fixed set of models, systems and paths, then
compare two dumps with `torch.equal`.

    PYTHONPATH=$PWD python scripts/bit_identity.py dump OUT_DIR [--only PATTERNS] [--device D]
    python scripts/bit_identity.py compare A_DIR B_DIR [--only PATTERNS]

`dump` writes one `<case>.pt` per case (a dict of output name -> tensor, rank 0's results;
a case that raises stores its message under "_error"). Case names are
`<model>-<system>-<path>-np<ranks>`; `--only` takes comma-separated fnmatch patterns of them.
Models whose packages are not importable here (SevenNet, NequIP and Allegro: `.venv-e3nn`)
are skipped with a line; run the same command with that venv's python to add them to the
same folder. `compare` prints, per case and output, whether the two are
`torch.equal` (and the largest absolute difference when not), and exits 1 when an output of
A differs in B, is missing from B, or a case of A is missing or failed in B. Outputs and cases
only in B are listed as new. How to use it: docs/bit_identity.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bit_identity_cases import Case, all_cases


def _matches(name: str, only: str | None) -> bool:
    patterns = [p.strip() for p in (only or "*").split(",") if p.strip()]
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _selected(cases: list[Case], only: str | None) -> list[Case]:
    return [c for c in cases if _matches(c.name, only)]


def dump(out_dir: Path, only: str | None, device: str) -> int:
    """Run the selected cases and save their outputs; returns the number of failed cases."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cases, skipped = all_cases(device)
    for line in skipped:
        print(f"skip: {line}")
    failed = 0
    start = time.perf_counter()
    for case in _selected(cases, only):
        t0 = time.perf_counter()
        try:
            outputs = case.run()
            status = "ok " + " ".join(sorted(k for k in outputs if not k.startswith("_")))
        except Exception as err:  # recorded: a failing path is part of the dump
            outputs = {"_error": f"{type(err).__name__}: {err}"[:2000]}
            status = "ERROR " + outputs["_error"].splitlines()[0][:200]
            traceback.print_exc(limit=-3)
            failed += 1
        torch.save(outputs, out_dir / f"{case.name}.pt")
        print(f"{case.name:48s} {time.perf_counter() - t0:6.1f} s  {status}", flush=True)
    print(f"dumped into {out_dir} in {time.perf_counter() - start:.0f} s; {failed} case(s) failed")
    return failed


def _difference(a: Any, b: Any) -> str:
    """'' when `a` and `b` are bit-identical tensors (or equal values), else a description."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"dtype/shape {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
        if torch.equal(a, b):
            return ""
        if a.is_floating_point():
            both_nan = a.isnan() & b.isnan()
            if bool((both_nan | (a == b)).all()):
                return ""
            return f"max abs difference {float((a - b).abs().nan_to_num(float('inf')).max()):.3e}"
        return f"{int((a != b).sum())} entries differ"
    return "" if a == b else f"{a!r} vs {b!r}"


def compare(a_dir: Path, b_dir: Path, only: str | None = None) -> int:
    """Print the per-case, per-output comparison of two dumps (the cases `only` matches);
    1 on any difference."""
    a_cases = {p.stem: p for p in sorted(a_dir.glob("*.pt")) if _matches(p.stem, only)}
    b_cases = {p.stem: p for p in sorted(b_dir.glob("*.pt")) if _matches(p.stem, only)}
    bad, lines = 0, []
    for name, path in a_cases.items():
        if name not in b_cases:
            lines.append(f"{name}: MISSING in {b_dir}")
            bad += 1
            continue
        a = torch.load(path, weights_only=False)
        b = torch.load(b_cases[name], weights_only=False)
        if "_error" in a or "_error" in b:
            same = a.get("_error") == b.get("_error")
            errors = (str(x.get("_error", "-"))[:120] for x in (a, b))
            lines.append("{}: error A={!r} B={!r}".format(name, *errors))
            bad += not same and "_error" in b
            continue
        for key in sorted({*a, *b}):
            if key not in b:
                lines.append(f"{name} {key}: MISSING in B")
                bad += 1
            elif key not in a:
                lines.append(f"{name} {key}: new in B")
            else:
                diff = _difference(a[key], b[key])
                lines.append(f"{name} {key}: {'equal' if not diff else 'DIFFERENT ' + diff}")
                bad += bool(diff)
    lines += [f"{name}: new in B" for name in b_cases if name not in a_cases]
    print("\n".join(lines))
    print(f"{len(a_cases)} cases in A, {len(b_cases)} in B: {bad} difference(s)")
    return int(bad > 0)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    dumper = commands.add_parser("dump", help="run every case and save its outputs")
    dumper.add_argument("out_dir", type=Path)
    dumper.add_argument("--only", help="comma-separated fnmatch patterns of case names")
    dumper.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    dumper.add_argument("--list", action="store_true", help="list the case names and exit")
    comparer = commands.add_parser("compare", help="compare two dumps with torch.equal")
    comparer.add_argument("a_dir", type=Path)
    comparer.add_argument("b_dir", type=Path)
    comparer.add_argument("--only", help="comma-separated fnmatch patterns of case names")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)  # e3nn/TorchScript noise
    if args.command == "compare":
        return compare(args.a_dir, args.b_dir, args.only)
    if args.list:
        cases, skipped = all_cases(args.device)
        print("\n".join([c.name for c in _selected(cases, args.only)] + skipped))
        return 0
    dump(args.out_dir, args.only, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
