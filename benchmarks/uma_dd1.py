"""UMA (fairchem's eSCN-MD): nvdd at one rank (DD@1) against fairchem's own plain forward.

    python benchmarks/uma_dd1.py --atoms 10976 [--json out.json]

"plain" is what a fairchem user runs without nvdd: the `HydraModel` (backbone + MLP energy
head, forces by autograd) on fairchem's own `AtomicData.from_ase`, its graph built by the
backbone on the device in every call (fairchem's `otf_graph`). "DD@1" is
`DistributedModel(UMAWrapper(same model))` on one device with a Verlet skin (--skin, default
the MD value 0.5 Å), at steady state (no rebuild in the timed calls). Both ask for energy and
forces; medians of --repeats calls timed in alternation; peak memory of one call each; max
|dF| between them. Model: random weights in --dtype (default float32), a dense UMA-S-sized
backbone (--layers 4 blocks, lmax = mmax = 2, --channels 128 sphere/hidden/edge channels, 64
Gaussians, cutoff 6 Å, fairchem's "general" execution mode), fcc Cu.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
from ase import Atoms
from common import compare_dd1, dd1_step, fcc_batch, print_dd1_rows, write_json

from nvdd_plugins import Batch
from nvdd_plugins.models import UMAWrapper, random_uma, uma_config

LATTICE, CUTOFF, SPECIES, TASK = 3.61, 6.0, (29,), "omat"


def plain_uma_step(model: torch.nn.Module, batch: Batch) -> Callable[[], Any]:
    """A closure running fairchem's model (energy + forces) on its own data for `batch`."""
    from fairchem.core.datasets.atomic_data import AtomicData

    atoms = Atoms(
        numbers=batch.atomic_numbers.cpu().numpy(),
        positions=batch.positions.double().cpu().numpy(),
        cell=batch.cell[0].double().cpu().numpy(),
        pbc=True,
    )
    dtype = batch.positions.dtype
    data = AtomicData.from_ase(atoms, task_name=TASK, radius=CUTOFF, target_dtype=dtype)
    data = data.to(batch.device)
    return lambda: model(data.clone())["efs"]["forces"]["forces"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--atoms", type=int, nargs="+", default=[10976])
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--skin", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--json")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    config = uma_config(
        cutoff=CUTOFF,
        num_layers=args.layers,
        channels=args.channels,
        num_distance_basis=64,
        regress_stress=False,
    )
    wrapper = UMAWrapper(random_uma(config, dtype=dtype), task_name=TASK).to(device)
    rows = []
    for n_atoms in args.atoms:
        batch = fcc_batch(n_atoms, LATTICE, SPECIES, dtype, device)
        plain = plain_uma_step(wrapper.model, batch)
        dd1 = dd1_step(wrapper, batch, args.skin)
        row = {"model": "uma-dense", "atoms": batch.num_nodes}
        rows.append(row | compare_dd1(plain, dd1, device, args.repeats))
    print_dd1_rows(rows)
    write_json(args.json, {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
