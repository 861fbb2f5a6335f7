"""NequIP and Allegro: nvdd at one rank (DD@1) against the package's own plain forward.

    python benchmarks/nequip_dd1.py --atoms 10976 [--models nequip allegro] [--json out.json]

"plain" is what a nequip user runs without nvdd: the `GraphModel` (its own force/stress head,
forces by autograd) on nequip's own data (`from_ase`, `ChemicalSpeciesToAtomTypeMapper`,
`NeighborListTransform` at the exact cutoff, built once). "DD@1" is
`DistributedModel(NequIPWrapper / AllegroWrapper(same model))` on one device with a Verlet
skin (--skin, default the MD value 0.5 Å), at steady state (no rebuild in the timed calls).
Both ask for energy and forces; medians of --repeats calls timed in alternation; peak memory
of one call each; max |dF| between them. Models: random weights in --dtype (default
float32), nequip's size "S" preset for NequIP (2 layers, l_max 1, 128x0e + 64x1o features,
radial MLP width 128) and an Allegro of similar size (2 layers, l_max 2, 128 scalar and 32
tensor features, MLPs of width 128), cutoff 5 Å, fcc Cu.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
from ase import Atoms
from common import compare_dd1, dd1_step, fcc_batch, print_dd1_rows, write_json

from nvdd_plugins import Batch
from nvdd_plugins.models import AllegroWrapper, NequIPWrapper, random_allegro, random_nequip

LATTICE, CUTOFF, SPECIES = 3.61, 5.0, (29,)  # fcc Cu, Å
BUILD = {
    "nequip": lambda dtype: NequIPWrapper(
        random_nequip(
            SPECIES,
            cutoff=CUTOFF,
            dtype=dtype,
            num_features=[128, 64],
            parity=False,
            type_embed_num_features=32,
            radial_mlp_width=128,
            avg_num_neighbors=40.0,
        )
    ),
    "allegro": lambda dtype: AllegroWrapper(
        random_allegro(
            SPECIES,
            cutoff=CUTOFF,
            dtype=dtype,
            l_max=2,
            num_scalar_features=128,
            num_tensor_features=32,
            allegro_mlp_hidden_layers_width=128,
            scalar_embed_mlp_hidden_layers_width=128,
            readout_mlp_hidden_layers_width=128,
            avg_num_neighbors=40.0,
        )
    ),
}


def plain_nequip_step(model: torch.nn.Module, batch: Batch) -> Callable[[], Any]:
    """A closure running the nequip `GraphModel` (energy + forces) on nequip's own data for
    `batch`'s crystal (data in float64, as nequip makes it)."""
    from nequip.data import AtomicDataDict, from_ase
    from nequip.data.transforms import ChemicalSpeciesToAtomTypeMapper, NeighborListTransform
    from nequip.utils import torch_default_dtype

    atoms = Atoms(
        numbers=batch.atomic_numbers.cpu().numpy(),
        positions=batch.positions.double().cpu().numpy(),
        cell=batch.cell[0].double().cpu().numpy(),
        pbc=True,
    )
    with torch_default_dtype(torch.float64):
        data = from_ase(atoms)
        data = ChemicalSpeciesToAtomTypeMapper(model_type_names=model.type_names)(data)
        data = NeighborListTransform(r_max=float(model.metadata["r_max"]))(data)
    data = AtomicDataDict.to_(data, batch.device)
    return lambda: model(dict(data))[AtomicDataDict.FORCE_KEY]


def case(kind: str, n_atoms: int, args: argparse.Namespace) -> dict[str, Any]:
    """Plain and DD@1 of one model on one crystal."""
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    wrapper = BUILD[kind](dtype).to(device)
    batch = fcc_batch(n_atoms, LATTICE, SPECIES, dtype, device)
    plain = plain_nequip_step(wrapper.model, batch)
    dd1 = dd1_step(wrapper, batch, args.skin)
    row: dict[str, Any] = {"model": kind, "atoms": batch.num_nodes, "dtype": args.dtype}
    return row | compare_dd1(plain, dd1, device, args.repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--atoms", type=int, nargs="+", default=[10976])
    parser.add_argument("--models", nargs="+", choices=sorted(BUILD), default=sorted(BUILD))
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--skin", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = [case(kind, n, args) for kind in args.models for n in args.atoms]
    print_dd1_rows(rows)
    write_json(args.json, {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
