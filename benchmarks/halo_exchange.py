"""Halo exchange time as a fraction of the step, two ranks sharing one device, plus a model
for P devices.

    python benchmarks/halo_exchange.py --model mace --atoms 20000 --device cuda

Two gloo processes (tensors staged through host memory, as two ranks on one GPU must) run
DistributedModel steps (energy + forces) on halves of an fcc crystal; every exchange is timed.
The model for P devices scales the measured bytes and message counts by the ghost fraction
of a P-rank decomposition and assumes --bandwidth GB/s and --latency us per message.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from common import fcc_batch, mace_model, synchronize, write_json
from distributed_overhead import ghost_fractions

from nvdd_plugins import DistributedModel, DomainConfig
from nvdd_plugins.comm import Communicator
from nvdd_plugins.comm.torch_dist import TorchDistCommunicator
from nvdd_plugins.models import LennardJonesModel, MACEWrapper


class TimedCommunicator(Communicator):
    """Delegates to another communicator and accumulates time and bytes of `exchange`."""

    def __init__(self, inner: Communicator, device: torch.device) -> None:
        self.inner, self.device = inner, device
        self.rank, self.size = inner.rank, inner.size
        self.seconds = 0.0
        self.bytes = 0
        self.messages = 0

    def exchange(self, sends: Mapping[int, torch.Tensor], recv_counts, template):
        synchronize(self.device)
        start = time.perf_counter()
        received = self.inner.exchange(sends, recv_counts, template)
        synchronize(self.device)
        self.seconds += time.perf_counter() - start
        self.bytes += sum(t.numel() * t.element_size() for t in sends.values())
        self.messages += sum(1 for t in sends.values() if t.shape[0])
        return received

    def all_reduce(self, tensor, op="sum"):
        return self.inner.all_reduce(tensor, op)

    def all_gather(self, tensor):
        return self.inner.all_gather(tensor)

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        return self.inner.broadcast_object(obj, src)

    def barrier(self) -> None:
        self.inner.barrier()


def _model(name: str, device: torch.device):
    if name == "lj":
        return LennardJonesModel(0.0104, 3.4, 8.5, shift=True), 5.26, (18,)
    return MACEWrapper(mace_model("small", (29,), torch.float32)).to(device), 3.61, (29,)


def _rank(rank: int, store: str, args: argparse.Namespace, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    device = torch.device(args.device)
    model, lattice, species = _model(args.model, device)
    comm = TimedCommunicator(TorchDistCommunicator(staging_device="cpu"), device)
    full = fcc_batch(args.atoms, lattice, species, torch.float32, device)
    distributed = DistributedModel(model, DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm))
    distributed.setup(full)
    ids = distributed.domain.select_owned(full.positions, full.cell[0])
    owned = full.select_nodes(ids)
    owned.add_node_property("global_ids", ids)
    distributed(owned)
    comm.seconds, comm.bytes, comm.messages = 0.0, 0, 0
    synchronize(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        distributed(owned)
    synchronize(device)
    total = time.perf_counter() - start
    view = distributed.domain.view
    torch.save(
        {
            "step_s": total / args.steps,
            "exchange_s": comm.seconds / args.steps,
            "bytes": comm.bytes / args.steps,
            "messages": comm.messages / args.steps,
            "owned": view.n_owned,
            "ghosts": view.plan.n_ghost,
        },
        os.path.join(out, f"rank{rank}.pt"),
    )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mace", choices=["mace", "lj"])
    parser.add_argument("--atoms", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--bandwidth", type=float, default=400.0, help="GB/s per direction")
    parser.add_argument("--latency", type=float, default=20.0, help="us per message")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(
            _rank, args=(os.path.join(out, "store"), args, out), nprocs=2, start_method="spawn"
        )
        ranks = [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(2)]
    step = max(r["step_s"] for r in ranks)
    exchange = max(r["exchange_s"] for r in ranks)
    print(
        f"# {args.model} float32, {args.atoms} atoms, 2 ranks on one {args.device}, gloo via host"
    )
    for r, row in enumerate(ranks):
        print(
            f"rank {r}: step {row['step_s']:.4f} s, exchange {row['exchange_s']:.4f} s "
            f"({100 * row['exchange_s'] / row['step_s']:.1f}%), {row['messages']:.0f} messages, "
            f"{row['bytes'] / 1e6:.2f} MB sent, {row['ghosts']} ghosts / {row['owned']} owned"
        )
    print(f"measured exchange fraction: {100 * exchange / step:.1f}% of the step")
    per_ghost_bytes = max(r["bytes"] for r in ranks) / max(max(r["ghosts"] for r in ranks), 1)
    messages = max(r["messages"] for r in ranks)
    print(
        f"\nmodel for P devices ({args.bandwidth} GB/s, {args.latency} us/message, "
        f"{args.atoms} atoms per device, weak scaling):"
    )
    print(f"{'P':>4} {'ghost/owned':>12} {'exchange[ms]':>13} {'fraction':>9}")
    modelled = []
    compute = step - exchange
    for world_size in args.ranks:
        ghosts = ghost_fractions(args.atoms * world_size, world_size, 8.5, 0.5)
        ghost_rows = ghosts["max_ghost_per_owned"] * args.atoms
        neighbours = 6 if world_size >= 8 else 2 * (world_size.bit_length() - 1)
        seconds = (messages / 1) * neighbours / 2 * args.latency * 1e-6 + (
            ghost_rows * per_ghost_bytes / (args.bandwidth * 1e9)
        )
        row = {
            "ranks": world_size,
            "ghost_per_owned": ghosts["max_ghost_per_owned"],
            "exchange_s": seconds,
            "fraction": seconds / (compute + seconds),
        }
        modelled.append(row)
        print(
            f"{world_size:4d} {row['ghost_per_owned']:12.3f} {1e3 * seconds:13.3f} "
            f"{100 * row['fraction']:8.1f}%"
        )
    write_json(args.json, {"args": vars(args), "measured": ranks, "modelled": modelled})


if __name__ == "__main__":
    main()
