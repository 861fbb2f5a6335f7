"""Graph partition against halo: memory per rank vs one rank, step time vs halo, side by side.

    python benchmarks/graph_vs_halo.py --model mpnn --atoms 4000 --ranks 2 4      # CPU, gloo
    torchrun --nproc_per_node=2 benchmarks/graph_vs_halo.py --device cuda --model mace

Without a launcher it starts `--ranks` gloo processes on the CPU, one group per rank count;
under torchrun (NCCL on GPUs) it measures the launched world. In each group both strategies
evaluate the same fcc crystal (energy + forces), timed in alternation, and rank 0 also runs
the one-rank baseline (graph partition on one rank: the model on the whole system, no
ghosts). A neighbour-list rebuild of the same atoms is timed too. Memory per rank is what
autograd keeps for the backward (bytes of distinct saved storages: the activations), and on
CUDA also the peak allocated during a step.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from typing import Any

import torch
from common import (
    fcc_batch,
    gloo_reports,
    interleaved_medians,
    mace_model,
    synchronize,
    write_json,
)

from nvdd_plugins import Batch, DistributedManager, DistributedModel, DomainConfig
from nvdd_plugins.comm import Communicator, SimulatedMesh
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import MACEWrapper, RadiusGraphMPNN, SimpleMPNN

STRATEGIES = (StrategyKind.HALO, StrategyKind.GRAPH_PARTITION)


def build_model(args: argparse.Namespace, device: torch.device) -> torch.nn.Module:
    """The benchmarked model in the run's dtype on `device`."""
    dtype = getattr(torch, args.dtype)
    if args.model == "mace":
        return MACEWrapper(mace_model(args.preset, (29,), dtype)).to(device)
    if args.model == "radius_graph":
        return RadiusGraphMPNN(cutoff=5.0, hidden=32, n_layers=3).to(device, dtype)
    return SimpleMPNN(cutoff=5.0, hidden=64, n_layers=3).to(device, dtype)


class SavedBytes:
    """Bytes of the distinct storages autograd saves for the backward while active."""

    def __init__(self) -> None:
        self.storages: dict[int, int] = {}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        self.storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    @property
    def total(self) -> int:
        """Bytes saved so far."""
        return sum(self.storages.values())


def measure_memory(step: Callable[[], Any], device: torch.device) -> dict[str, float]:
    """Saved-for-backward bytes of one step and, on CUDA, its peak allocation above the
    memory held before it (MiB)."""
    saved = SavedBytes()
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda tensor: tensor):
        step()
    result = {"saved_mib": saved.total / 2**20}
    if device.type == "cuda":
        synchronize(device)
        result["peak_mib"] = (torch.cuda.max_memory_allocated(device) - before) / 2**20
    return result


def _distributed(
    model: torch.nn.Module, full: Batch, comm: Communicator, strategy: StrategyKind
) -> tuple[DistributedModel, Batch]:
    distributed = DistributedModel(model, DomainConfig(model.cutoff, 0.5, comm, strategy=strategy))
    distributed.setup(full)
    ids = distributed.domain.select_owned(full.positions, full.cell[0])
    owned = full.select_nodes(ids)
    owned.add_node_property("global_ids", ids)
    distributed(owned)  # the first (checked) step builds the view
    return distributed, owned


def _layout(distributed: DistributedModel) -> dict[str, int]:
    view = distributed.domain.view
    edges = int((view.edge_index[0] < view.n_rows).sum())
    return {"owned": view.n_owned, "ghosts": view.plan.n_ghost, "edges": edges}


def measure(comm: Communicator, device: torch.device, args: argparse.Namespace) -> dict:
    """This rank's step times, memory and layout per strategy, plus (rank 0) the one-rank
    baseline."""
    torch.manual_seed(0)
    model = build_model(args, device)
    full = fcc_batch(args.atoms, 3.61, (29,), getattr(torch, args.dtype), device)
    strategies = STRATEGIES[1:] if args.model == "radius_graph" else STRATEGIES
    runs = {s.value: _distributed(model, full, comm, s) for s in strategies}
    steps = {name: (lambda d=d, o=o: d(o)) for name, (d, o) in runs.items()}
    report: dict[str, Any] = {"seconds": interleaved_medians(steps, args.repeats, device)}
    report["memory"] = {name: measure_memory(step, device) for name, step in steps.items()}
    report["layout"] = {name: _layout(d) for name, (d, _) in runs.items()}
    # a neighbour-list rebuild of the same atoms (graph partition: gather + whole system)
    rebuilds = {name: (lambda d=d, o=o: d.domain.build(o)) for name, (d, o) in runs.items()}
    report["rebuild_seconds"] = interleaved_medians(rebuilds, args.repeats, device, warmup=1)
    if comm.rank == 0:
        # the one-rank baseline inside a launched world is deliberate: no warning about it
        logging.getLogger("nvdd_plugins.comm.resolve").setLevel(logging.ERROR)
        one_rank = SimulatedMesh(1).communicator(0)
        alone, owned = _distributed(model, full, one_rank, StrategyKind.GRAPH_PARTITION)
        step = lambda: alone(owned)  # noqa: E731
        report["one_rank"] = {
            "seconds": interleaved_medians({"one": step}, args.repeats, device)["one"],
            "memory": measure_memory(step, device),
        }
    comm.barrier()
    return report


def summarise(world_size: int, reports: list[dict], args: argparse.Namespace) -> dict:
    """Print the table of one rank count; returns its numbers."""
    base = reports[0]["one_rank"]
    names = list(reports[0]["seconds"])
    keys = [k for k in ("saved_mib", "peak_mib") if k in base["memory"]]
    print(
        f"\n# {args.model}{'/' + args.preset if args.model == 'mace' else ''} {args.dtype}, "
        f"{args.atoms} atoms, {world_size} ranks on {args.device}; one rank: "
        f"{base['seconds']:.4f} s/step, " + ", ".join(f"{k} {base['memory'][k]:.1f}" for k in keys)
    )
    header = f"{'strategy':>16} {'step s':>9} {'vs halo':>8} {'vs 1 rank':>9}"
    header += "".join(f" {k + ' max':>13} {'vs 1 rank':>9}" for k in keys)
    print(header + f" {'ghost/owned':>12} {'edges/rank':>11} {'rebuild s':>10}")
    rows = {}
    for name in names:
        seconds = max(r["seconds"][name] for r in reports)
        memory = {k: max(r["memory"][name][k] for r in reports) for k in keys}
        ghosts = max(
            r["layout"][name]["ghosts"] / max(r["layout"][name]["owned"], 1) for r in reports
        )
        edges = max(r["layout"][name]["edges"] for r in reports)
        versus_halo = "-"
        if "halo" in names:
            versus_halo = f"{seconds / max(r['seconds']['halo'] for r in reports):.2f}"
        line = f"{name:>16} {seconds:9.4f} {versus_halo:>8} {seconds / base['seconds']:9.2f}"
        line += "".join(f" {memory[k]:13.1f} {memory[k] / base['memory'][k]:9.2f}" for k in keys)
        rebuild = max(r["rebuild_seconds"][name] for r in reports)
        print(line + f" {ghosts:12.2f} {edges:11d} {rebuild:10.4f}")
        rows[name] = {
            "seconds": seconds,
            "memory": memory,
            "ghost_per_owned": ghosts,
            "rebuild_seconds": rebuild,
        }
    return {"one_rank": base, "strategies": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mpnn", choices=["mpnn", "mace", "radius_graph"])
    parser.add_argument("--preset", default="tiny", choices=["tiny", "small", "medium"])
    parser.add_argument("--atoms", type=int, default=4000)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--port", type=int, default=29533)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = {}
    if "WORLD_SIZE" in os.environ:  # launched (torchrun): measure this world
        manager = DistributedManager.initialize(device=args.device)
        report = measure(manager.mesh, manager.device, args)
        gathered = [None] * manager.world_size
        torch.distributed.all_gather_object(gathered, report)
        if manager.rank == 0:
            results[manager.world_size] = summarise(manager.world_size, gathered, args)
            write_json(args.json, {"args": vars(args), "results": results})
        DistributedManager.cleanup()
        return
    for world_size in args.ranks:
        reports = gloo_reports(world_size, args.port + world_size, measure, args)
        results[world_size] = summarise(world_size, reports, args)
    write_json(args.json, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
