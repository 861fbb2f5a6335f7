"""The MD step with and without CUDA graphs on one GPU, against plain mace-torch.

    python benchmarks/cuda_graph_step.py --atoms 864 2916 10976 108000 --backends cueq e3nn

For each backend (MACE "small", random weights, float32) and fcc Cu crystal (300 K, skin
0.5 Å, dt 1 fs), in one run:
  plain   mace-torch's own force call on a prebuilt neighbour list (`mace_cueq.plain_mace_step`:
          what a user runs without nvdd), median of --repeats calls;
  eager   `DomainParallel(NVE)` step at one rank, `cuda_graphs=False`;
  graphs  the same with `cuda_graphs=True`: steps between rebuilds replayed from one graph;
  replay  the captured graph alone, replayed back to back (kernel time of a step: the floor);
  ase     ASE's VelocityVerlet with nvdd's `DomainDecomposedCalculator`, eager force calls
          (--ase-backends, default cueq only); `in calc` is the part of its step spent in the
          calculator's `calculate`, the rest is ASE's integrator and property plumbing;
  ase+g   the same with `cuda_graphs=True`: force calls between rebuilds replayed.
MD rows are wall seconds per step over --steps steps after --warmup steps, rebuilds
included (their count is printed).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch
from common import fcc_batch, mace_model, median_seconds, synchronize, write_json
from mace_cueq import LATTICE, in_backend, plain_mace_step

from nvdd_plugins import DomainConfig, DomainParallel
from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import MACEWrapper

DT_FS = 1.0
TEMPERATURE_K = 300.0


def per_step(run: Callable[[int], Any], steps: int, warmup: int, device: torch.device) -> float:
    """Wall seconds per step of `run(n)` (n steps), after `warmup` steps."""
    run(warmup)
    synchronize(device)
    start = time.perf_counter()
    run(steps)
    synchronize(device)
    return (time.perf_counter() - start) / steps


def domain_parallel_step(
    wrapper: MACEWrapper, n_atoms: int, graphs: bool, args: argparse.Namespace
) -> dict[str, Any]:
    """Seconds per `DomainParallel(NVE)` step (and, with graphs, per bare replay)."""
    device = torch.device("cuda")
    config = DomainConfig(
        cutoff=wrapper.cutoff, skin=args.skin, mesh=LocalCommunicator(), cuda_graphs=graphs
    )
    dd = DomainParallel(NVE(wrapper, DT_FS), config)
    batch = dd.partition(fcc_batch(n_atoms, LATTICE, (29,), torch.float32, device, TEMPERATURE_K))
    rebuilds = dd.model.rebuilds
    seconds = per_step(lambda n: dd.run(batch, n), args.steps, args.warmup, device)
    row = {"s": seconds, "rebuilds": dd.model.rebuilds - rebuilds}
    graph = dd.dynamics.graphed.graph
    if graphs and graph is not None:
        row["replay_s"] = per_step(lambda n: [graph.replay() for _ in range(n)], 20, 2, device)
        row["captures"] = dd.dynamics.graphed.captures
    return row


def ase_step(
    wrapper: MACEWrapper, n_atoms: int, graphs: bool, args: argparse.Namespace
) -> dict[str, Any]:
    """Seconds per step of ASE's VelocityVerlet with nvdd's calculator on the GPU, and of
    that the seconds spent in the calculator's `calculate`."""
    from ase.md.verlet import VelocityVerlet
    from ase.units import fs

    from nvdd_plugins.ase import DomainDecomposedCalculator

    device = torch.device("cuda")
    batch = fcc_batch(n_atoms, LATTICE, (29,), torch.float64, torch.device("cpu"), TEMPERATURE_K)
    atoms = batch.to_atoms()[0]
    atoms.set_masses(batch.atomic_masses.numpy())
    atoms.set_velocities(batch.velocities.numpy())
    calc = DomainDecomposedCalculator(wrapper, skin=args.skin, device=device, cuda_graphs=graphs)
    atoms.calc = calc
    in_calc = [0.0]
    calculate = calc.calculate

    def timed(*a: Any, **kw: Any) -> None:
        start = time.perf_counter()
        calculate(*a, **kw)
        in_calc[0] += time.perf_counter() - start

    calc.calculate = timed  # type: ignore[method-assign]
    dynamics = VelocityVerlet(atoms, DT_FS * fs)
    dynamics.run(args.warmup)
    in_calc[0] = 0.0
    row = {"s": per_step(dynamics.run, args.steps, 0, device), "calc_s": in_calc[0] / args.steps}
    if calc.graphed_calls is not None:
        row["captures"], row["replays"] = calc.graphed_calls.captures, calc.graphed_calls.replays
    return row


def case(backend: str, n_atoms: int, args: argparse.Namespace) -> dict[str, Any]:
    """One row: plain, eager, graphs, replay and ASE, and the ratios."""
    device = torch.device("cuda")
    model = in_backend(mace_model("small", (29,), torch.float32).to(device), backend)
    model.requires_grad_(False)
    wrapper = MACEWrapper(model)
    batch = fcc_batch(n_atoms, LATTICE, (29,), torch.float32, device)
    row: dict[str, Any] = {"backend": backend, "atoms": batch.num_nodes}
    row["plain_s"] = median_seconds(plain_mace_step(model, batch), args.repeats, device)
    eager = domain_parallel_step(wrapper, n_atoms, False, args)
    graphs = domain_parallel_step(wrapper, n_atoms, True, args)
    row["eager_s"], row["eager_rebuilds"] = eager["s"], eager["rebuilds"]
    row["graphs_s"], row["graphs_rebuilds"] = graphs["s"], graphs["rebuilds"]
    row["replay_s"], row["captures"] = graphs.get("replay_s"), graphs.get("captures")
    row["ase_s"] = row["ase_graphs_s"] = None
    if backend in args.ase_backends:
        ase, ase_graphs = (ase_step(wrapper, n_atoms, g, args) for g in (False, True))
        row["ase_s"], row["ase_calc_s"] = ase["s"], ase["calc_s"]
        row["ase_graphs_s"], row["ase_graphs_calc_s"] = ase_graphs["s"], ase_graphs["calc_s"]
        row["ase_captures"], row["ase_replays"] = (
            ase_graphs.get("captures"),
            ase_graphs.get("replays"),
        )
        row["ase_over_graphs"] = row["ase_s"] / row["graphs_s"]
        row["ase_graphs_over_graphs"] = row["ase_graphs_s"] / row["graphs_s"]
        row["ase_graphs_over_eager"] = row["ase_graphs_s"] / row["eager_s"]
    row["eager_over_plain"] = row["eager_s"] / row["plain_s"]
    row["graphs_over_plain"] = row["graphs_s"] / row["plain_s"]
    torch.cuda.empty_cache()
    return row


def print_rows(rows: list[dict[str, Any]]) -> None:
    """The table of `case` rows, milliseconds; rebuilds and graph captures of the graph run;
    then the ASE rows against the DomainParallel steps."""
    print(
        "backend  atoms   plain   eager  graphs  replay     ase   ase+g  eager/plain"
        "  graphs/plain  rebuilds captures"
    )
    names = ("plain_s", "eager_s", "graphs_s", "replay_s", "ase_s", "ase_graphs_s")
    for r in rows:
        ms = " ".join(f"{1e3 * r[k]:7.2f}" if r.get(k) else "      -" for k in names)
        print(
            f"{r['backend']:7} {r['atoms']:6d} {ms} {r['eager_over_plain']:12.2f} "
            f"{r['graphs_over_plain']:13.2f}  {r['graphs_rebuilds']:8d} {r['captures']}"
        )
    print(
        "backend  atoms  ase in-calc  ase+g in-calc  ase/graphs  ase+g/graphs  ase+g/eager"
        "  ase+g captures/replays"
    )
    for r in (r for r in rows if r.get("ase_s")):
        print(
            f"{r['backend']:7} {r['atoms']:6d} {1e3 * r['ase_calc_s']:11.2f} "
            f"{1e3 * r['ase_graphs_calc_s']:14.2f} {r['ase_over_graphs']:11.2f} "
            f"{r['ase_graphs_over_graphs']:13.2f} {r['ase_graphs_over_eager']:12.2f}  "
            f"{r['ase_captures']}/{r['ase_replays']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--atoms", type=int, nargs="+", default=[864, 2916, 10976, 108000])
    parser.add_argument("--backends", nargs="+", default=["cueq", "e3nn"])
    parser.add_argument("--skin", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--ase-backends", nargs="*", default=["cueq"], help="ASE rows for these")
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for backend in args.backends:
        for n_atoms in args.atoms:
            rows.append(case(backend, n_atoms, args))
            print(rows[-1], flush=True)
            write_json(args.json, {"args": vars(args), "rows": rows})  # kept if cut short
    print_rows(rows)


if __name__ == "__main__":
    main()
