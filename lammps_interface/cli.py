"""`python -m lammps_interface`: write the model file for `pair_style mliap unified`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
from ase.data import atomic_numbers

from lammps_interface.model import MLIAPModel
from nvdd_plugins.models import (
    BaseModelMixin,
    LennardJonesModel,
    MACEWrapper,
    SevenNetWrapper,
    SimpleMPNN,
)

__all__ = ["build_model", "main"]

DTYPES = {"float64": torch.float64, "float32": torch.float32}
METAL_SKIN = 2.0  # LAMMPS's default neighbour skin in metal units, Å


EXAMPLES = """examples:
  python -m lammps_interface --lj 0.0104 3.4 8.5 --shift --elements Ar -o lj.pkl
  python -m lammps_interface --mpnn-seed 0 --cutoff 4.5 --elements Ar -o mpnn.pkl
  python -m lammps_interface --mace model.pt --elements Cu -o mace.pkl
then, in the input script (units metal), the lines it prints, and: mpirun -n 2 lmp -in in.x"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lammps_interface",
        description="Write an nvdd model as a pickle for `pair_style mliap unified <file> 0` "
        "(units metal) and print the input-script lines that load it.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument(
        "--lj",
        nargs=3,
        type=float,
        metavar=("EPSILON", "SIGMA", "CUTOFF"),
        help="Lennard-Jones: epsilon (eV), sigma and cutoff (Å)",
    )
    kind.add_argument(
        "--mpnn-seed", type=int, metavar="N", help="random-weight SimpleMPNN with this seed"
    )
    kind.add_argument("--mace", metavar="PATH", help="a mace-torch model saved with torch.save")
    kind.add_argument(
        "--sevennet",
        metavar="NAME",
        help="a pretrained SevenNet shipped in sevenn's wheel, by sevenn's name (7net-0, "
        "7net-0_22May2024, 7net-l3i5, 7net-mf-0 with --modality); needs sevenn (.venv-e3nn)",
    )
    parser.add_argument("--modality", help="SevenNet: the fidelity of a multi-fidelity model")
    parser.add_argument(
        "--shift", action="store_true", help="LJ: shift energies to 0 at the cutoff"
    )
    parser.add_argument("--cutoff", type=float, help="SimpleMPNN cutoff, Å")
    parser.add_argument("--hidden", type=int, default=16, help="SimpleMPNN feature width")
    parser.add_argument("--layers", type=int, default=3, help="SimpleMPNN message-passing layers")
    parser.add_argument(
        "--elements", nargs="+", required=True, help="element of each LAMMPS atom type, in order"
    )
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float64")
    parser.add_argument(
        "--cuequivariance",
        action="store_true",
        help="MACE: convert to cuEquivariance (on a GPU when there is one here: fused "
        "convolution; converted on a CPU the convolution stays unfused)",
    )
    parser.add_argument(
        "--device",
        help="where each LAMMPS rank computes: cpu, cuda (the rank's own GPU on its node), "
        "cuda:K; default: the rank's own GPU when CUDA is present, else the CPU. Chosen at "
        "the run's first step, so the file runs on any machine",
    )
    parser.add_argument("-o", "--output", required=True, help="the .pkl file to write")
    return parser


def build_model(args: argparse.Namespace) -> tuple[BaseModelMixin, int]:
    """The model the arguments describe, with its number of message-passing layers."""
    if args.lj is not None:
        epsilon, sigma, cutoff = args.lj
        return LennardJonesModel(epsilon, sigma, cutoff, shift=args.shift), 1
    if args.mpnn_seed is not None:
        if args.cutoff is None:
            raise ValueError("--mpnn-seed needs --cutoff (Å)")
        model = SimpleMPNN(
            cutoff=args.cutoff, hidden=args.hidden, n_layers=args.layers, seed=args.mpnn_seed
        )
        return model, args.layers
    if args.sevennet is not None:
        sevennet = SevenNetWrapper.from_pretrained(args.sevennet, args.modality, DTYPES[args.dtype])
        return sevennet, int(sevennet.distribution_spec().n_layers)
    convert_on = "cuda" if args.cuequivariance and torch.cuda.is_available() else "cpu"
    wrapper = MACEWrapper.from_file(
        args.mace, convert_on, DTYPES[args.dtype], cuequivariance=args.cuequivariance
    )
    return wrapper, int(wrapper.model.num_interactions)


def input_lines(path: str, elements: Sequence[str], n_layers: int, cutoff: float) -> str:
    """The input-script lines for the model file, and the fallback variant."""
    fallback = (
        f"pair_style mliap unified {path} 0"
        if n_layers == 1
        else f"comm_modify cutoff {n_layers * cutoff + METAL_SKIN:g}  "
        f"# {n_layers} layers x {cutoff:g} Å + neighbor skin (metal default {METAL_SKIN:g})\n"
        f"pair_style mliap unified {path} 1"
    )
    return "\n".join(
        [
            "# input script (units metal; newton_pair on, the default):",
            'python attach input 1 SELF format p here "from lammps_interface import attach"',
            "python attach invoke",
            f"pair_style mliap unified {path} 0",
            f"pair_coeff * * {' '.join(elements)}",
            "# nvdd lists the model's pairs itself; this spares ML-IAP's C++ side its pair list",
            "# each step (3x the step at 10^5 atoms). Remove it for per-atom virials (compute",
            "# stress/atom, heat/flux) and computes that use neighbour lists (rdf, coord/atom):",
            "neigh_modify exclude group all all",
            "# without the two `python` lines (no ghost exchange, redundant compute) use instead",
            "# (and no neigh_modify exclude: that mode computes from ML-IAP's pairs):",
            *(f"#   {line}" for line in fallback.splitlines()),
        ]
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Parse `argv`, write the model file, print the lines to paste. Bad input ends with a
    one-line message and exit status 2, not a traceback."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        model, n_layers = build_model(args)
        if isinstance(model, MACEWrapper | SevenNetWrapper):
            model.check_species(torch.tensor([atomic_numbers.get(e, 0) for e in args.elements]))
        bridge = MLIAPModel(model, args.elements, DTYPES[args.dtype], n_layers, device=args.device)
        bridge.pickle(args.output)
    except (ImportError, OSError, TypeError, ValueError) as err:
        parser.error(str(err))
    print(
        f"wrote {args.output}: {type(model).__name__}, cutoff {model.cutoff:g} Å, "
        f"{n_layers} message-passing layer(s), {args.dtype}, elements {' '.join(args.elements)}, "
        f"device {args.device or 'each rank its own GPU if any, else CPU'}"
    )
    print(input_lines(args.output, args.elements, n_layers, model.cutoff))
