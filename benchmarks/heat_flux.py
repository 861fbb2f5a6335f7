"""An MD step with the heat flux against one without, side by side in one run.

    python benchmarks/heat_flux.py --atoms 864                       # CPU (10k is hours here)
    python benchmarks/heat_flux.py --atoms 10976 --device cuda --dtype float32 [--cueq]

NVE of fcc copper with random-weight MACE small (32x0e+32x1o, L 3, r_max 5 Å) through the
one-rank engine, three integrators timed in alternation: a plain step; a plain step on a
view imaging every periodic axis (what the heat flux needs: one rank along a wide axis
otherwise wraps its pairs); and a step with `HeatFluxLogger` (the per-atom heat-flux tensors:
three more backwards). Printed: ms per step, rows per view and the ratios (with/without,
and its two factors).
"""

from __future__ import annotations

import argparse

import torch
from common import fcc_batch, interleaved_medians, mace_model, write_json

from nvdd_plugins.dynamics import NVE, HeatFluxLogger
from nvdd_plugins.models import MACEWrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--atoms", type=int, default=10976)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--cueq", action="store_true", help="cuEquivariance MACE")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)

    model = MACEWrapper(mace_model("small", (29,), dtype), cuequivariance=args.cueq).to(device)
    full = fcc_batch(args.atoms, 3.61, (29,), dtype, device, temperature=300.0)
    runs = {name: (NVE(model, 2.0, skin=0.5), full.copy()) for name in ("plain", "imaged", "flux")}
    runs["flux"][0].attach(HeatFluxLogger())
    for dynamics, batch in runs.values():
        dynamics.step(batch)  # builds each engine
    runs["imaged"][0].evaluator.engine.domain.image_periodic_axes()

    def step(name: str):
        dynamics, batch = runs[name]
        return lambda: dynamics.step(batch)

    seconds = interleaved_medians({name: step(name) for name in runs}, args.rounds, device, 1)
    rows = {name: runs[name][0].evaluator.engine.domain.view.n_rows for name in runs}
    ratios = {
        "flux/plain": seconds["flux"] / seconds["plain"],
        "imaged/plain": seconds["imaged"] / seconds["plain"],
        "flux/imaged": seconds["flux"] / seconds["imaged"],
    }
    print(f"MACE small, {full.num_nodes} atoms, {args.dtype}, {args.device}")
    for name in runs:
        print(f"  {name:>6}: {1e3 * seconds[name]:10.1f} ms/step, {rows[name]} rows")
    for name, ratio in ratios.items():
        print(f"  {name}: {ratio:.2f}")
    write_json(args.json, {"seconds": seconds, "rows": rows, "ratios": ratios, **vars(args)})


if __name__ == "__main__":
    main()
