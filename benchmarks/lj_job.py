"""Issue 22's Ar Lennard-Jones NVE job, the parts nvdd's and the peer's drivers share.

Imports only torch and numpy, so it also runs in the peer's scratch venv (where nvdd is not
installed): the crystal and velocities, the command line, the timing loop and the printed
lines that `cpu_vs_peer.py` parses from both.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

EPSILON, SIGMA, CUTOFF, LATTICE, DT_FS = 0.0104, 3.40, 8.5, 5.26, 1.0
ARGON_MASS = 40.0
FCC_BASIS = ((0.0, 0.0, 0.0), (0.0, 0.5, 0.5), (0.5, 0.0, 0.5), (0.5, 0.5, 0.0))
KB_EV = 8.617333262e-5  # Boltzmann constant, eV/K


def fcc_crystal(
    n_atoms: int, lattice: float, rattle: float, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cubic fcc supercell with about `n_atoms` atoms, randomly displaced by `rattle` Å."""
    repeats = max(1, round((n_atoms / 4) ** (1.0 / 3.0)))
    grid = torch.stack(
        torch.meshgrid(*(torch.arange(repeats, dtype=torch.float64),) * 3, indexing="ij"), dim=-1
    ).reshape(-1, 1, 3)
    positions = ((grid + torch.tensor(FCC_BASIS, dtype=torch.float64)) * lattice).reshape(-1, 3)
    generator = torch.Generator().manual_seed(0)
    positions += rattle * torch.randn(positions.shape, generator=generator, dtype=torch.float64)
    cell = torch.eye(3, dtype=torch.float64) * (repeats * lattice)
    return positions.to(device, dtype), cell.to(device, dtype)


def maxwell_velocities(n_atoms: int, temperature: float, mass: float = ARGON_MASS) -> np.ndarray:
    """(n_atoms, 3) Maxwell-Boltzmann velocities (ASE units) drawn with numpy seed 0."""
    sigma = np.sqrt(KB_EV * temperature / mass)
    return np.random.default_rng(0).normal(scale=sigma, size=(n_atoms, 3))


def job_arguments(description: str) -> argparse.ArgumentParser:
    """The command line both drivers take (each adds its own options)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--atoms", type=int, nargs="+", default=[2048, 4000])
    parser.add_argument("--skin", type=float, nargs="+", default=[0.0, 1.0], help="Å")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=5, help="timed blocks per case")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--check", type=int, default=0, help="print E_total after N steps")
    parser.add_argument("--json", help="write the results here (rank 0)")
    return parser


def median_rate(
    run_steps: Callable[[int], None], barrier: Callable[[], None], args: argparse.Namespace
) -> float:
    """Median steps/s of `args.rounds` blocks of `args.steps` steps after `args.warmup`
    steps (`run_steps(n)` advances n steps; `barrier` lines the ranks up before a block)."""
    run_steps(args.warmup)
    rates = []
    for _ in range(args.rounds):
        barrier()
        start = time.perf_counter()
        run_steps(args.steps)
        rates.append(args.steps / (time.perf_counter() - start))
    return statistics.median(rates)


def print_header(title: str, checking: bool) -> None:
    """The title line, and the table header unless the run checks energies."""
    print(title)
    if not checking:
        print(f"{'atoms':>6} {'skin[Å]':>7} {'steps/s':>8} {'ms/step':>8} {'core-µs/atom':>12}")


def print_row(atoms: int, skin: float, rate: float, ranks: int) -> None:
    """One table row: steps/s, ms per step and core-µs per atom-step."""
    per_atom = 1e6 / rate / atoms * ranks
    print(f"{atoms:6d} {skin:7.2f} {rate:8.2f} {1e3 / rate:8.2f} {per_atom:12.2f}")


def print_check(
    skin: float, steps: int, first: tuple[float, float, int], last: tuple[float, float, int]
) -> dict:
    """The CHECK lines of (potential, kinetic, atoms) after 1 and `steps` steps; the row."""
    for step, (pot, kin, n) in ((1, first), (steps, last)):
        print(
            f"CHECK atoms {n} skin {skin:.2f} step {step:3d} "
            f"E_pot {pot:.15e} E_kin {kin:.15e} E_tot {pot + kin:.15e}"
        )
    return {"atoms": first[2], "skin": skin, "steps": steps, "e_total": sum(last[:2])}
