"""NVE on one GPU with the steps between neighbour-list rebuilds replayed as a CUDA graph.

    python examples/single_gpu/cuda_graphs_md.py --device cuda --cells 6     # MACE, 864 atoms
    python examples/single_gpu/cuda_graphs_md.py                             # CPU: graphs off

The same run twice, `DomainConfig(cuda_graphs=False)` and `cuda_graphs="auto"` (the default:
on for an NVE run of a model on a CUDA device at one rank, while it pays): the graph run
captures the step once per neighbour list and replays it until an atom has moved half the
skin, then takes that step eagerly (rebuild). Prints the time per step of each run and how
far apart their trajectories are (rounding: GPU scatters sum in a varying order). On a CPU
`cuda_graphs="auto"` resolves to off and only the eager run is made.
"""

from __future__ import annotations

import argparse
import time

import torch
from chunked_md import crystal  # this directory's chunked example: the same crystal

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import BaseModelMixin, MACEWrapper, SimpleMPNN, random_mace


def run(
    model: BaseModelMixin, graphs: bool | str, args: argparse.Namespace
) -> tuple[Batch, float, DomainParallel]:
    """`args.steps` NVE steps; the final batch, seconds per step and the driver."""
    config = DomainConfig(
        cutoff=model.cutoff, skin=0.5, mesh=LocalCommunicator(), cuda_graphs=graphs
    )
    dd = DomainParallel(NVE(model, 1.0), config)
    batch = dd.partition(crystal(args.cells, args.device, args.dtype))
    dd.run(batch, 1)  # the first evaluation
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    dd.run(batch, args.steps)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    return batch, (time.perf_counter() - start) / args.steps, dd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cells", type=int, default=4, help="fcc cells per axis (4 atoms each)")
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    on_gpu = args.device.startswith("cuda")
    args.dtype = torch.float32 if on_gpu else torch.float64
    if on_gpu:
        model = MACEWrapper(random_mace([29], r_max=5.0, dtype=args.dtype).to(args.device))
    else:
        model = SimpleMPNN(cutoff=4.5, hidden=16, n_layers=2, seed=7).double()
        args.steps, args.cells = min(args.steps, 5), min(args.cells, 3)
    eager, eager_s, _ = run(model, False, args)
    print(f"{eager.num_nodes} atoms, eager: {1e3 * eager_s:.2f} ms per step")
    replayed, graph_s, dd = run(model, "auto", args)
    print(f"cuda_graphs resolved: {dd.model.config.cuda_graphs}")
    if dd.model.config.cuda_graphs:
        deviation = float((replayed.positions - eager.positions).abs().max())
        print(
            f"graphs: {1e3 * graph_s:.2f} ms per step ({eager_s / graph_s:.1f}x), "
            f"{dd.dynamics.graphed.captures} captures, {dd.model.rebuilds} rebuilds, "
            f"max |dx| against eager {deviation:.2g} Å"
        )


if __name__ == "__main__":
    main()
