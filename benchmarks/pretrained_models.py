"""Pretrained SevenNet-0 and CHGNet 0.3.0 through nvdd against each package's own calculator.

    .venv-e3nn/bin/python benchmarks/pretrained_models.py --model sevennet0 --atoms 4096 32768
    .venv-chgnet/bin/python benchmarks/pretrained_models.py --model chgnet --atoms 1000 10648

On rocksalt MgO (8 n³ atoms: the sizes are rounded to cubes), float32 as the packages
compute, one device. Per size, medians of --repeats calls timed in alternation:

* `theirs_force`: the package's own ASE calculator (`SevenNetCalculator("7net-0")`,
  `CHGNetCalculator`) computing energy and forces for the atoms (its neighbour list built
  anew in every call, as it is in MD);
* `nvdd_md`: one NVE step of `DomainParallel` at one rank (Verlet skin --skin, CUDA graphs
  "auto"), steady state;
* `theirs_ase_md` / `nvdd_ase_md`: one ASE `VelocityVerlet` step with their calculator and
  with nvdd's `DomainDecomposedCalculator`.

Ratios nvdd / theirs (goal <= 0.5) and the largest force difference of one call are printed.
A size at which their call runs out of GPU memory and nvdd's does not gets nvdd's MD step
time and peak memory alone; one at which nvdd's runs out says so.

    python benchmarks/pretrained_models.py --model sevennet0 --cueq --largest 140608 474552

`--largest`: the sizes at which their calculator's force call is tried (its largest that fits
is the figure to beat), then NVE steps of nvdd's `ChunkedEvaluator` (chunks sized from the
free memory) at the `--chunked` sizes (default: 4x their largest): step time, peak memory and
atoms over their largest.
"""

from __future__ import annotations

import argparse
import gc
import math
import warnings
from typing import Any

warnings.filterwarnings("ignore", message=".*(cuEquivariance|FlashTP|OpenEquivariance).*")
warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad=True")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from ase import Atoms, units  # noqa: E402
from ase.build import bulk  # noqa: E402
from ase.calculators.calculator import all_changes  # noqa: E402
from ase.md.velocitydistribution import thermalize_momenta  # noqa: E402
from ase.md.verlet import VelocityVerlet  # noqa: E402
from common import (  # noqa: E402
    interleaved_medians,
    machine,
    median_seconds,
    peak_gib,
    reset_memory,
    write_json,
)

from nvdd_plugins import Batch, ChunkedEvaluator, DomainConfig, DomainParallel  # noqa: E402
from nvdd_plugins.ase import DomainDecomposedCalculator  # noqa: E402
from nvdd_plugins.dynamics import NVE  # noqa: E402
from nvdd_plugins.models import BaseModelMixin, CHGNetWrapper, SevenNetWrapper  # noqa: E402

LATTICE = {"sevennet0": 4.2547, "chgnet": 4.25}  # Å, near each model's own MgO minimum


def mgo(n_atoms: int, lattice: float) -> Atoms:
    """Rocksalt MgO of about `n_atoms` (8 n³), rattled, with 300 K velocities."""
    cells = max(1, round((n_atoms / 8) ** (1 / 3)))
    atoms = bulk("MgO", "rocksalt", a=lattice, cubic=True) * (cells, cells, cells)
    atoms.rattle(0.02, seed=0)
    thermalize_momenta(atoms, temperature_K=300, rng=np.random.default_rng(0))
    return atoms


def models(name: str, device: str, cueq: bool) -> tuple[BaseModelMixin, Any]:
    """nvdd's wrapper and the package's own calculator, both float32 on `device`; `cueq`:
    SevenNet-0 through sevenn's cuEquivariance tensor products on both sides."""
    if name == "sevennet0":
        from sevenn.calculator import SevenNetCalculator

        wrapper = SevenNetWrapper.from_pretrained("7net-0", cueq=cueq).to(device)
        return wrapper, SevenNetCalculator("7net-0", device=device, enable_cueq=cueq)
    from chgnet.model import CHGNetCalculator

    wrapper = CHGNetWrapper.from_pretrained("0.3.0").to(device)
    return wrapper, CHGNetCalculator(wrapper.model, use_device=device)


def their_force_call(calc: Any, atoms: Atoms):
    """Their calculator's energy + forces, computed anew (not from ASE's cache)."""

    def call() -> np.ndarray:
        calc.calculate(atoms, ["energy", "forces"], all_changes)
        return calc.results["forces"]

    return call


def nvdd_md_step(wrapper: BaseModelMixin, atoms: Atoms, skin: float, device: str):
    """One NVE step of DomainParallel at one rank (steady state after the warm-up)."""
    config = DomainConfig(cutoff=wrapper.cutoff, skin=skin)
    dynamics = DomainParallel(NVE(wrapper, 1.0), config, n_steps=1)
    owned = dynamics.partition(Batch.from_atoms(atoms).to(torch.device(device), torch.float32))
    return lambda: dynamics.run(owned, n_steps=1)


def ase_md_step(calc: Any, atoms: Atoms):
    """One ASE VelocityVerlet step of a copy of `atoms` with `calc`."""
    moving = atoms.copy()
    moving.calc = calc
    verlet = VelocityVerlet(moving, 1.0 * units.fs)
    return lambda: verlet.run(1)


def size_row(
    wrapper: BaseModelMixin, theirs: Any, ours: Any, atoms: Atoms, args: argparse.Namespace
) -> dict[str, Any]:
    """The timings and ratios of one system size, printed as a table row."""
    device = torch.device(args.device)
    force_ours = DomainDecomposedCalculator(wrapper, skin=0.0, device=args.device)
    force_ours.calculate(atoms, ["energy", "forces"], all_changes)
    try:
        their_forces = their_force_call(theirs, atoms)()
    except torch.OutOfMemoryError:  # theirs does not fit, nvdd's call did: time nvdd alone
        reset_memory(device)
        md_step = nvdd_md_step(wrapper, atoms, args.skin, args.device)
        step = median_seconds(md_step, args.repeats, device)
        r = {"model": args.model, "atoms": len(atoms), "theirs_force": "out of memory"}
        r |= {"nvdd_md": step, "nvdd_peak_gib": peak_gib(device)}
        print(f"{r['model']:10} {r['atoms']:6d} {'out of memory':>12} {1e3 * step:11.1f}")
        return r
    fns = {
        "theirs_force": their_force_call(theirs, atoms),
        "nvdd_md": nvdd_md_step(wrapper, atoms, args.skin, args.device),
        "theirs_ase_md": ase_md_step(theirs, atoms),
        "nvdd_ase_md": ase_md_step(ours, atoms),
    }
    times = interleaved_medians(fns, args.repeats, device)
    r = {"model": args.model, "cueq": args.cueq, "atoms": len(atoms), **times}
    r["nvdd_md_over_theirs"] = times["nvdd_md"] / times["theirs_force"]
    r["ase_over_theirs"] = times["nvdd_ase_md"] / times["theirs_ase_md"]
    r["max_abs_dF"] = float(np.abs(force_ours.results["forces"] - their_forces).max())
    print(
        f"{r['model']:10} {r['atoms']:6d} {1e3 * r['theirs_force']:12.1f} "
        f"{1e3 * r['nvdd_md']:11.1f} {r['nvdd_md_over_theirs']:6.3f} "
        f"{1e3 * r['theirs_ase_md']:13.1f} {1e3 * r['nvdd_ase_md']:12.1f} "
        f"{r['ase_over_theirs']:6.3f} {r['max_abs_dF']:8.1e}",
        flush=True,
    )
    return r


def their_largest(theirs: Any, sizes: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Their force call at each size until one does not fit: time and peak memory."""
    device = torch.device(args.device)
    rows = []
    for n_atoms in sizes:
        atoms = mgo(n_atoms, LATTICE[args.model])
        row: dict[str, Any] = {"mode": "theirs", "atoms": len(atoms)}
        try:
            reset_memory(device)
            row["step_s"] = median_seconds(their_force_call(theirs, atoms), args.repeats, device, 1)
            row["peak_gib"] = peak_gib(device)
        except torch.OutOfMemoryError:
            row["step_s"] = "out of memory"
        reset_memory(device)
        rows.append(row)
        print(row, flush=True)
        if row["step_s"] == "out of memory":
            break
    return rows


def chunked_row(wrapper: BaseModelMixin, n_atoms: int, args: argparse.Namespace) -> dict[str, Any]:
    """NVE steps of nvdd's ChunkedEvaluator at `n_atoms`: chunks, step time, peak memory."""
    device = torch.device(args.device)
    atoms = mgo(n_atoms, LATTICE[args.model])
    batch = Batch.from_atoms(atoms).to(device, torch.float32)
    dynamics = NVE(wrapper, 1.0)
    evaluator = ChunkedEvaluator(wrapper)
    dynamics.evaluator = evaluator
    reset_memory(device)
    seconds = median_seconds(lambda: dynamics.step(batch), args.repeats, device, 1)
    plan = evaluator.plan(batch)
    return {
        "mode": "nvdd_chunked",
        "atoms": len(atoms),
        "chunks": len(plan.rows),
        "max_rows": evaluator.max_atoms,
        "step_s": seconds,
        "peak_gib": peak_gib(device),
        "finite": bool(torch.isfinite(batch.positions).all()),
    }


def largest(wrapper: BaseModelMixin, theirs: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Their largest force call against nvdd's chunked NVE at the --chunked sizes (default:
    the smallest crystal of at least 4x their largest)."""
    rows = their_largest(theirs, args.largest, args)
    fitting = [r["atoms"] for r in rows if isinstance(r["step_s"], float)]
    if args.chunked is None:
        sizes = [8 * math.ceil((4 * max(fitting or [1]) / 8) ** (1 / 3)) ** 3]
    else:
        sizes = args.chunked
    for n_atoms in sizes:
        try:
            row = chunked_row(wrapper, n_atoms, args)
        except torch.OutOfMemoryError:
            row = {"mode": "nvdd_chunked", "atoms": n_atoms, "step_s": "out of memory"}
        if fitting:
            row["atoms_vs_their_largest"] = row["atoms"] / max(fitting)
        reset_memory(torch.device(args.device))
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(LATTICE), default="sevennet0")
    parser.add_argument("--atoms", type=int, nargs="+", default=[4096])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--skin", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cueq", action="store_true", help="SevenNet: cuEquivariance, both")
    parser.add_argument("--largest", type=int, nargs="+", help="their sizes to try (GPU)")
    parser.add_argument("--chunked", type=int, nargs="*", help="nvdd's chunked sizes (none: skip)")
    parser.add_argument("--json")
    args = parser.parse_args()
    wrapper, theirs = models(args.model, args.device, args.cueq)
    if args.largest:
        rows = largest(wrapper, theirs, args)
        write_json(args.json, {"args": vars(args), "machine": machine(), "rows": rows})
        return
    ours = DomainDecomposedCalculator(wrapper, skin=args.skin, device=args.device)
    print(
        f"{'model':10} {'atoms':>6} {'theirs F ms':>12} {'nvdd MD ms':>11} {'ratio':>6} "
        f"{'their ASE ms':>13} {'nvdd ASE ms':>12} {'ratio':>6} {'max|dF|':>8}",
        flush=True,
    )
    rows = []
    for n_atoms in args.atoms:
        atoms = mgo(n_atoms, LATTICE[args.model])
        try:
            row = size_row(wrapper, theirs, ours, atoms, args)
        except torch.OutOfMemoryError:  # a size that does not fit ends its row, not the run
            row = {"model": args.model, "atoms": len(atoms), "error": "nvdd out of GPU memory"}
            print(f"{args.model:10} {len(atoms):6d} nvdd out of GPU memory", flush=True)
        finally:
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        rows.append(row)
    write_json(args.json, {"args": vars(args), "machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
