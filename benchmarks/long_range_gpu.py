"""Long-range terms on one GPU, side by side with the model without them (issue 46).

    python benchmarks/long_range_gpu.py mace_d3 [--atoms 10976] [--cueq]
    python benchmarks/long_range_gpu.py aimnet_pme [--atoms 10000]

`mace_d3`: a step (energy + forces, DistributedModel at one rank: what DomainParallel runs on
one GPU) of MACE small (32x0e+32x1o, L=3, r_max 5 Å, random weights, float32) on fcc Cu,
and of `SumModel(MACE, DFTD3Model)` (PBE-D3(BJ), pairs within `--d3-cutoff`, coordination
numbers within `--cn-cutoff`), timed in alternation: the ratio is the goal (<= 1.2).

`aimnet_pme`: a step of a random AIMNet2 of aimnet2's size (16 features x 16 shifts,
hidden 256, float32) on an H/C/O box at the density of water, with an external PME
Coulomb term (order 5, `--spacing`, real space `--rc`: the wrapper's cutoff becomes
`--rc`) and without one (the short-range Coulomb embedded only): the long-range share
1 - t(without) / t(with) is the goal (<= 20 %).
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from common import (
    dd1_step,
    fcc_batch,
    interleaved_medians,
    mace_model,
    water_like_box,
    write_json,
)

from nvdd_plugins.models import PME, DFTD3Model, Ewald, MACEWrapper, SumModel

PBE_D3BJ = {"a1": 0.4289, "a2": 4.4407, "s8": 0.7875}


def mace_d3(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    batch = fcc_batch(args.atoms, 3.61, (29,), torch.float32, device)
    mace = mace_model("small", (29,), torch.float32).to(device)
    if args.cueq:
        from nvdd_plugins.models.cueq import to_cuequivariance

        mace = to_cuequivariance(mace)
    d3 = DFTD3Model(
        **PBE_D3BJ, cutoff=args.d3_cutoff, cn_cutoff=args.cn_cutoff, dtype=torch.float32
    ).to(device)
    steps = {
        "mace": dd1_step(MACEWrapper(mace), batch, args.skin),
        "mace+d3": dd1_step(SumModel(MACEWrapper(mace), d3), batch, args.skin),
    }
    times = interleaved_medians(steps, args.repeats, device)
    row = {"atoms": batch.num_nodes, **{f"{k}_s": v for k, v in times.items()}}
    row["ratio"] = times["mace+d3"] / times["mace"]
    print(
        f"{row['atoms']} atoms: MACE {1e3 * times['mace']:.1f} ms, MACE + D3 "
        f"{1e3 * times['mace+d3']:.1f} ms, ratio {row['ratio']:.3f} (goal <= 1.2)"
    )
    return row


def aimnet_pme(args: argparse.Namespace) -> dict[str, Any]:
    from aimnet.modules import LRCoulomb

    from nvdd_plugins.models import AIMNet2Wrapper, random_aimnet2

    device = torch.device(args.device)
    batch = water_like_box(args.atoms, device)
    model = random_aimnet2(5.0, 4.6, nfeature=16, nshifts=16, hidden=256, dtype=torch.float32)
    model = model.to(device)
    alpha = Ewald.for_accuracy(args.rc, 1e-5).alpha
    pme = PME.for_cell(alpha, batch.cell[0].cpu(), args.spacing, order=6)
    pme = PME(alpha, pme.mesh, 5, scheme="nvalchemiops")
    head = LRCoulomb(key_out="energy", method="pme", subtract_sr=False).to(device)
    steps = {
        "without": dd1_step(AIMNet2Wrapper(model), batch, args.skin),
        "with_pme": dd1_step(AIMNet2Wrapper(model, head, 0.0, 1.0, pme, args.rc), batch, args.skin),
    }
    times = interleaved_medians(steps, args.repeats, device)
    share = 1.0 - times["without"] / times["with_pme"]
    row = {"atoms": batch.num_nodes, "mesh": pme.mesh, **{f"{k}_s": v for k, v in times.items()}}
    row["long_range_share"] = share
    print(
        f"{row['atoms']} atoms, mesh {pme.mesh}: AIMNet2 {1e3 * times['without']:.1f} ms, with "
        f"PME {1e3 * times['with_pme']:.1f} ms: long-range share {100 * share:.1f} % (goal <= 20)"
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["mace_d3", "aimnet_pme"])
    parser.add_argument("--atoms", type=int, default=10976)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--skin", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--cueq", action="store_true", help="MACE through cuEquivariance")
    parser.add_argument("--d3-cutoff", type=float, default=12.0, help="Å")
    parser.add_argument("--cn-cutoff", type=float, default=10.0, help="Å")
    parser.add_argument("--rc", type=float, default=8.0, help="PME real-space cutoff, Å")
    parser.add_argument("--spacing", type=float, default=1.0, help="PME mesh spacing, Å")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    row = {"mace_d3": mace_d3, "aimnet_pme": aimnet_pme}[args.what](args)
    write_json(args.json, {"args": vars(args), "rows": [row]})


if __name__ == "__main__":
    main()
