"""The MD step with and without CUDA graphs on one GPU, against plain mace-torch.

    python benchmarks/cuda_graph_step.py --atoms 864 2916 10976 108000 --backends cueq e3nn

For each backend (MACE "small", random weights, float32) and fcc Cu crystal (300 K, skin
0.5 Å, dt 1 fs), in one run:
  plain   mace-torch's own force call on a prebuilt neighbour list (`mace_cueq.plain_mace_step`:
          what a user runs without nvdd), median of --repeats calls;
  eager   `DomainParallel(NVE)` step at one rank, `cuda_graphs=False` (`--integrator
          langevin`: `NVTLangevin` at 300 K, friction 0.01/fs, in every DomainParallel row);
  auto    the same with `cuda_graphs="auto"` (the default): graphs while they pay;
  graphs  the same with `cuda_graphs=True`: steps between rebuilds replayed from one graph;
  replay  wall time per kept replay of the graph run (`GraphPayoff.replayed_step`: one
          launch per step, so about the kernel time of a step, the floor);
  ase     ASE's VelocityVerlet with nvdd's `DomainDecomposedCalculator`, eager force calls
          (`cuda_graphs=False`; --ase-backends, default cueq only);
  ase+a   the same with `cuda_graphs="auto"`: force calls between rebuilds replayed while
          the graphs pay. The json's `ase*_calc_s` is the part of an ASE step spent in the
          calculator's `calculate` (the rest is ASE's integrator and property checks).
MD rows are wall seconds per step over --steps steps after --warmup steps, rebuilds
included (their count is printed). A mode that runs out of GPU memory is reported as such.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any

import torch
from common import fcc_batch, mace_model, median_seconds, synchronize, write_json
from mace_cueq import LATTICE, in_backend, plain_mace_step

from nvdd_plugins import DomainConfig, DomainParallel
from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.dynamics import NVE, BaseDynamics, NVTLangevin
from nvdd_plugins.models import MACEWrapper

DT_FS = 1.0
TEMPERATURE_K = 300.0


def integrator(wrapper: MACEWrapper, args: argparse.Namespace) -> BaseDynamics:
    """The `DomainParallel` rows' integrator (--integrator)."""
    if args.integrator == "langevin":
        return NVTLangevin(wrapper, DT_FS, temperature=TEMPERATURE_K, friction=0.01)
    return NVE(wrapper, DT_FS)


def per_step(run: Callable[[int], Any], steps: int, warmup: int, device: torch.device) -> float:
    """Wall seconds per step of `run(n)` (n steps), after `warmup` steps."""
    run(warmup)
    synchronize(device)
    start = time.perf_counter()
    run(steps)
    synchronize(device)
    return (time.perf_counter() - start) / steps


def domain_parallel_step(
    wrapper: MACEWrapper, n_atoms: int, graphs: bool | str, args: argparse.Namespace
) -> dict[str, Any]:
    """Seconds per `DomainParallel(NVE)` step (and, with graphs, per replayed step)."""
    device = torch.device("cuda")
    config = DomainConfig(
        cutoff=wrapper.cutoff, skin=args.skin, mesh=LocalCommunicator(), cuda_graphs=graphs
    )
    dd = DomainParallel(integrator(wrapper, args), config)
    batch = dd.partition(fcc_batch(n_atoms, LATTICE, (29,), torch.float32, device, TEMPERATURE_K))
    rebuilds = dd.model.rebuilds
    seconds = per_step(lambda n: dd.run(batch, n), args.steps, args.warmup, device)
    graphed = dd.dynamics.graphed
    row = {"s": seconds, "rebuilds": dd.model.rebuilds - rebuilds, "captures": graphed.captures}
    if graphed.declined:
        row["declined"] = graphed.declined
    if graphed.payoff.replayed_step is not None:
        row["replay_s"] = graphed.payoff.replayed_step
    return row


def out_of_memory_as_row(run: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """`run(*args)`, or a row saying it ran out of GPU memory; afterwards the run's memory
    (graph pools held by reference cycles too) goes back before the next mode."""
    try:
        return run(*args)
    except torch.OutOfMemoryError:
        return {"error": "out of GPU memory"}
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def ase_step(
    wrapper: MACEWrapper, n_atoms: int, graphs: bool | str, args: argparse.Namespace
) -> dict[str, Any]:
    """Seconds per step ("s") of ASE's VelocityVerlet with nvdd's calculator on the GPU, and
    of that the seconds in the calculator's `calculate` ("calc_s")."""
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
    calls = calc.graphed_calls
    if calls is not None:
        row.update(captures=calls.captures, replays=calls.replays)
        if calls.declined:
            row["declined"] = calls.declined
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
    for mode, graphs in (("eager", False), ("auto", "auto"), ("graphs", True)):
        ran = out_of_memory_as_row(domain_parallel_step, wrapper, n_atoms, graphs, args)
        row.update({f"{mode}_{key}": value for key, value in ran.items()})
        if "s" in ran:
            row[f"{mode}_over_plain"] = ran["s"] / row["plain_s"]
    for mode, graphs in (("ase", False), ("ase_auto", "auto")):
        if backend not in args.ase_backends:
            break
        ran = out_of_memory_as_row(ase_step, wrapper, n_atoms, graphs, args)
        row.update({f"{mode}_{key}": value for key, value in ran.items()})
        if "s" in ran and "auto_s" in row:
            row[f"{mode}_over_auto"] = ran["s"] / row["auto_s"]
    torch.cuda.empty_cache()
    return row


def print_rows(rows: list[dict[str, Any]]) -> None:
    """The table of `case` rows, milliseconds, ratios to plain; rebuilds and captures of the
    graph runs."""
    print(
        "backend  atoms   plain   eager    auto  graphs  replay     ase   ase+a  eager/p  auto/p"
        "  graphs/p  ase/auto  ase+a/auto  rebuilds captures(auto,graphs)"
    )
    names = ("plain_s", "eager_s", "auto_s", "graphs_s", "graphs_replay_s", "ase_s", "ase_auto_s")
    ratios = (
        "eager_over_plain",
        "auto_over_plain",
        "graphs_over_plain",
        "ase_over_auto",
        "ase_auto_over_auto",
    )
    for r in rows:
        ms = " ".join(f"{1e3 * r[k]:7.2f}" if r.get(k) else "      -" for k in names)
        ratio = " ".join(f"{r[k]:8.2f}" if k in r else "       -" for k in ratios)
        print(
            f"{r['backend']:7} {r['atoms']:6d} {ms} {ratio}  {r.get('graphs_rebuilds', '-')!s:>8} "
            f"{r.get('auto_captures', '-')},{r.get('graphs_captures', '-')}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--atoms", type=int, nargs="+", default=[864, 2916, 10976, 108000])
    parser.add_argument("--backends", nargs="+", default=["cueq", "e3nn"])
    parser.add_argument("--skin", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--integrator", choices=["nve", "langevin"], default="nve")
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
