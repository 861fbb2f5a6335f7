"""MACE on one GPU beyond its memory: NVE in chunks against plain mace-torch at its largest.

    python benchmarks/chunked_mace.py --plain 629856 --atoms 629856 2515456
    python benchmarks/chunked_mace.py --backend e3nn --plain 157216 --atoms 636056
    python benchmarks/chunked_mace.py --preset medium --plain 202612 --atoms 202612 821516

"plain" is mace-torch alone (cuEquivariance unless --backend e3nn; mace's own neighbour
list, `compute_force=True`; see mace_cueq.py), timed at the --plain sizes (its largest that
fits is the figure to beat). "chunked" is `NVE` whose evaluator is
`ChunkedEvaluator(MACEWrapper(same model))`: the crystal cut into chunks that fit the free
GPU memory (measured on the first step, or --max-atoms rows per chunk), evaluated one after
another with a ghost shell of n_layers x r_max. Prints per size: chunks, redundant rows,
median step time, atom-steps/s and peak memory, and the ratio of atom-steps/s to plain's at
its largest --plain size.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import torch
from common import fcc_batch, mace_model, median_seconds, write_json
from mace_cueq import LATTICE, in_backend, plain_mace_step

from nvdd_plugins import ChunkedEvaluator
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import MACEWrapper


def plain_rate(model: torch.nn.Module, n_atoms: int, repeats: int) -> dict[str, Any]:
    """Plain mace step time, atom-steps/s and peak memory at `n_atoms` (or out of memory)."""
    device = torch.device("cuda")
    batch = fcc_batch(n_atoms, LATTICE, (29,), torch.float32, device)
    row: dict[str, Any] = {"mode": "plain", "atoms": batch.num_nodes}
    try:
        step = plain_mace_step(model, batch)
        torch.cuda.reset_peak_memory_stats(device)
        seconds = median_seconds(step, repeats, device, warmup=1)
        row |= {"step_s": seconds, "atom_steps_per_s": batch.num_nodes / seconds}
        row["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    except torch.OutOfMemoryError:
        row["step_s"] = "out of memory"
    return row


def chunked_rate(
    wrapper: MACEWrapper, n_atoms: int, repeats: int, max_atoms: int | None
) -> dict[str, Any]:
    """NVE steps through ChunkedEvaluator: chunks, redundancy, step time, peak memory."""
    device = torch.device("cuda")
    batch = fcc_batch(n_atoms, LATTICE, (29,), torch.float32, device, temperature=300.0)
    dynamics = NVE(wrapper, dt=1.0)
    evaluator = ChunkedEvaluator(wrapper, max_atoms=max_atoms)
    dynamics.evaluator = evaluator
    torch.cuda.reset_peak_memory_stats(device)
    seconds = median_seconds(lambda: dynamics.step(batch), repeats, device, warmup=1)
    plan = evaluator.plan(batch)
    return {
        "mode": "chunked",
        "atoms": batch.num_nodes,
        "chunks": len(plan.rows),
        "grid": plan.grid,
        "max_rows": evaluator.max_atoms,
        "redundancy": plan.redundancy,
        "step_s": seconds,
        "atom_steps_per_s": batch.num_nodes / seconds,
        "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30,
        "finite": bool(torch.isfinite(batch.positions).all()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--backend", choices=["cueq", "e3nn"], default="cueq")
    parser.add_argument("--plain", type=int, nargs="*", default=[629856])
    parser.add_argument("--atoms", type=int, nargs="+", default=[629856, 2515456])
    parser.add_argument("--max-atoms", type=int, help="rows per chunk (default: measured)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--verbose", action="store_true", help="log chunk planning and progress")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s")
    model = in_backend(mace_model(args.preset, (29,), torch.float32).cuda(), args.backend)
    model = model.requires_grad_(False)
    print(f"# MACE {args.preset} ({args.backend}), float32, fcc Cu, one GPU", flush=True)
    rows = []
    for n in args.plain:
        rows.append(plain_rate(model, n, args.repeats))
        print(rows[-1], flush=True)
        torch.cuda.empty_cache()
    fitting = [r for r in rows if isinstance(r["step_s"], float)]
    best_plain = max(fitting, key=lambda r: r["atoms"]) if fitting else None
    wrapper = MACEWrapper(model)
    for n in args.atoms:
        row = chunked_rate(wrapper, n, args.repeats, args.max_atoms)
        if best_plain is not None:
            row["rate_vs_plain_largest"] = row["atom_steps_per_s"] / best_plain["atom_steps_per_s"]
            row["atoms_vs_plain_largest"] = row["atoms"] / best_plain["atoms"]
        rows.append(row)
        print(row, flush=True)
        torch.cuda.empty_cache()
    write_json(args.json, {"preset": args.preset, "backend": args.backend, "rows": rows})


if __name__ == "__main__":
    main()
