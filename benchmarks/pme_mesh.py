"""PME's mesh whole (one all-reduce) or in slabs (all-to-alls), across real gloo ranks.

    OMP_NUM_THREADS=1 python benchmarks/pme_mesh.py [--ranks 1 2 4 8] [--mesh 32 64 128]
        [--layouts whole slabs]

For each rank count and cubic mesh: one energy + forces evaluation of rigid-ion NaCl (PME
order 4, the mesh given, 216 ions: the mesh dominates) through the ASE calculator's layout
(ReplicatedModel), with `PME(layout="whole")` and `PME(layout="slabs")`. Printed per rank
(the largest over the ranks): the bytes it sends per evaluation (forward and backward, every
collective: halo exchanges, all-reduces, all-to-alls), the seconds per evaluation (median of
`--repeats`, after two warm-ups) and two memory figures:

* "peak MB": the growth of its peak resident memory during the first evaluation (VmHWM after
  resetting it, minus VmRSS before): every allocation of that evaluation, the mesh's and the
  rest, as the process sees it (code pages and libraries first touched, and glibc's heap,
  which keeps freed blocks and can grow to about twice what is allocated);
* "live MB": the largest sum of the sizes of the torch tensors' storages alive at once during
  the second evaluation (forward and backward) that were created during it (`LiveTensors`):
  every tensor an op returns, the mesh's and all others (per-atom arrays, neighbour lists,
  index arrays, communication buffers), each storage counted once (views are free) from its
  creation until it is freed. Not counted: tensors alive from before the evaluation, and
  memory that is no tensor (FFT work buffers inside pocketfft, gloo's own buffers, Python
  objects).

Each configuration runs in fresh processes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from ase.build import bulk
from common import write_json
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import Communicator, TorchDistCommunicator
from nvdd_plugins.models import PME, Ewald, RigidIonModel
from nvdd_plugins.models.rigid_ion import NACL_CHARGES, TOSI_FUMI_NACL

CUTOFF = 6.0  # Å


class CountingCommunicator(Communicator):
    """Counts the bytes this rank sends through `inner`."""

    def __init__(self, inner: Communicator) -> None:
        self.inner, self.rank, self.size = inner, inner.rank, inner.size
        self.sent = 0

    def exchange(
        self, sends: Mapping[int, torch.Tensor], recv_counts: Mapping[int, int], template
    ) -> dict[int, torch.Tensor]:
        self.sent += sum(t.numel() * t.element_size() for t in sends.values())
        return self.inner.exchange(sends, recv_counts, template)

    def all_to_all(
        self, sends: Sequence[torch.Tensor], recv_counts: Sequence[int], template
    ) -> list[torch.Tensor]:
        self.sent += sum(
            t.numel() * t.element_size() for q, t in enumerate(sends) if q != self.rank
        )
        return self.inner.all_to_all(sends, recv_counts, template)

    def all_to_all_single(
        self, x: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int]
    ) -> torch.Tensor:
        row = x[0].numel() * x.element_size() if x.shape[0] else 0
        self.sent += row * (sum(send_counts) - send_counts[self.rank])
        return self.inner.all_to_all_single(x, send_counts, recv_counts)

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        # a ring all-reduce sends 2 (P - 1) / P of the tensor from each rank
        self.sent += 2 * (self.size - 1) * tensor.numel() * tensor.element_size() // self.size
        return self.inner.all_reduce(tensor, op)

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        self.sent += (self.size - 1) * tensor.numel() * tensor.element_size()
        return self.inner.all_gather(tensor)

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        return self.inner.broadcast_object(obj, src)

    def barrier(self) -> None:
        self.inner.barrier()


class LiveTensors(TorchDispatchMode):
    """While active: the bytes of the tensor storages created since it was entered and still
    alive (`live`), and their largest value (`peak`). Every op's output storage is counted
    once, when first seen, until it is freed (a finalizer on the storage); an output that
    shares an input's storage (a view, an in-place op) is not new."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.seen: dict[int, int] = {}

    def _freed(self, key: int) -> None:
        self.live -= self.seen.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs = {
            t.untyped_storage()._cdata
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor)
        }
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key = storage._cdata
            if key in self.seen or key in inputs:
                continue
            self.seen[key] = storage.nbytes()
            self.live += self.seen[key]
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._freed, key)
        return out


def _memory_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _worker(rank: int, world: int, store: str, n: int, layout: str, repeats: int, out: str):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    comm = CountingCommunicator(TorchDistCommunicator())
    atoms = bulk("NaCl", "rocksalt", a=5.64, cubic=True).repeat(3)
    alpha = Ewald.for_accuracy(CUTOFF, 1e-6).alpha
    model = RigidIonModel(
        NACL_CHARGES, TOSI_FUMI_NACL, CUTOFF, PME(alpha, (n,) * 3, 4, layout=layout)
    )
    distributed = ReplicatedModel(model, DomainConfig(cutoff=CUTOFF, skin=0.3, mesh=comm))
    batch = Batch.from_atoms(atoms)
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # resets VmHWM to the current resident size
    before = _memory_kb("VmRSS")
    distributed(batch, ("energy", "forces"))
    growth = (_memory_kb("VmHWM") - before) / 1024
    with LiveTensors() as live:
        distributed(batch, ("energy", "forces"))
    samples, sent = [], []
    for _ in range(repeats):
        dist.barrier()
        comm.sent = 0
        start = time.perf_counter()
        distributed(batch, ("energy", "forces"))
        samples.append(time.perf_counter() - start)
        sent.append(comm.sent)
    result = torch.tensor([statistics.median(samples), max(sent) / 1e6, growth, live.peak / 1e6])
    gathered = [torch.zeros_like(result) for _ in range(world)]
    dist.all_gather(gathered, result)
    if rank == 0:
        torch.save(torch.stack(gathered).amax(dim=0), out)
    dist.barrier()
    dist.destroy_process_group()


def measure(world: int, n: int, layout: str, repeats: int) -> list[float]:
    """[seconds, MB sent, peak memory growth MB, live tensors MB] (largest over the ranks)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.pt")
        args = (world, os.path.join(tmp, "store"), n, layout, repeats, out)
        mp.start_processes(_worker, args=args, nprocs=world, start_method="fork")
        return torch.load(out).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--mesh", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--layouts", nargs="+", default=["whole", "slabs"], help="for more than one rank"
    )
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    rows = []
    header = f"{'mesh':>6} {'ranks':>5} {'layout':>7} {'s/eval':>8} {'MB sent':>8}"
    print(f"{header} {'peak MB':>8} {'live MB':>8}")
    for n in args.mesh:
        for world in args.ranks:
            for layout in args.layouts if world > 1 else ("whole",):
                seconds, sent, growth, live = measure(world, n, layout, args.repeats)
                rows.append(
                    {
                        "mesh": n,
                        "ranks": world,
                        "layout": layout,
                        "seconds": seconds,
                        "mb_sent": sent,
                        "peak_mb": growth,
                        "live_mb": live,
                    }
                )
                row = f"{n:>5}³ {world:5d} {layout:>7} {seconds:8.3f} {sent:8.2f}"
                print(f"{row} {growth:8.1f} {live:8.1f}")
    write_json(args.json, {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
