"""Thermal conductivity of liquid argon (Lennard-Jones) by Green–Kubo, from nvdd's heat flux
along a domain-decomposed NVE trajectory.

    python examples/heat_flux/green_kubo_argon.py --short      # seconds: 108 atoms, 300 steps
    python examples/heat_flux/green_kubo_argon.py              # the documented run (hours)
    torchrun --nproc_per_node=2 examples/heat_flux/green_kubo_argon.py --short
    mpirun -n 2 python -m mpi4py examples/heat_flux/green_kubo_argon.py --short

The state point is the one of Viscardy, Servantie and Gaspard, J. Chem. Phys. 126, 184513
(2007): LJ truncated at 2.5 sigma (not shifted, as LAMMPS's lj/cut), T* = 0.722, rho* =
0.8442, with argon's sigma = 3.405 Å, epsilon/k_B = 119.8 K, m = 39.948 amu (T = 86.5 K).
Langevin dynamics equilibrates, NVE produces; `HeatFluxLogger` records J(t) every step
(one all-reduce of six numbers per step). Rank 0 then integrates the autocorrelation,

    kappa(t) = 1 / (3 V k_B T^2) int_0^t <J(0) . J(s)> ds,

reads kappa at --window ps, estimates its statistical error from independent blocks of the
run, compares with the literature in W/(m K) and in LJ units, plots the running integral to
a PNG (with matplotlib; without it, says so) and saves the series (.npz).
"""

from __future__ import annotations

import argparse
import math

import ase.units
import numpy as np
import torch
from ase.lattice.cubic import FaceCenteredCubic
from ase.md.velocitydistribution import Stationary, thermalize_momenta

from nvdd_plugins import Batch, DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.dynamics import (
    NVE,
    DynamicsStage,
    HeatFluxLogger,
    NVTLangevin,
    ThermoLogger,
    kinetic_partials,
)
from nvdd_plugins.models import LennardJonesModel

SIGMA, EPSILON_K, MASS = 3.405, 119.8, 39.948  # Å, K, amu
T_STAR, RHO_STAR, CUTOFF_SIGMAS = 0.722, 0.8442, 2.5
# kappa* of the same model (N = 1372): Viscardy et al. 2007 (Helfand moment, 6e5 tau*), and
# Toraman, Fauconnier, Verstraelen, J. Chem. Inf. Model. 65, 10445 (2025) (LAMMPS + STACIE)
LITERATURE = {"Viscardy et al. 2007": (6.946, 0.12), "Toraman et al. 2025": (7.108, 0.10)}
EV, ANGSTROM, FS, KB_SI, AMU = 1.602176634e-19, 1e-10, 1e-15, 1.380649e-23, 1.66053906660e-27


class TemperatureLog:
    """The temperature (K) of the whole system at the end of every step (one all-reduce)."""

    stage = DynamicsStage.AFTER_STEP
    frequency = 1

    def __init__(self) -> None:
        self.values: list[float] = []

    def __call__(self, ctx, stage) -> None:
        sums = ctx.dynamics.reduce_sums(kinetic_partials(ctx.batch))
        self.values.append(float(sums["mv2"] / (3 * sums["atoms"] * ase.units.kB)))


def liquid(cells: int, seed: int) -> Batch:
    """fcc argon at rho* with Maxwell–Boltzmann velocities at T* (it melts when run)."""
    lattice = (4 / (RHO_STAR / SIGMA**3)) ** (1 / 3)
    atoms = FaceCenteredCubic("Ar", size=(cells,) * 3, latticeconstant=lattice)
    thermalize_momenta(atoms, temperature_K=T_STAR * EPSILON_K, rng=np.random.default_rng(seed))
    Stationary(atoms)
    return Batch.from_atoms(atoms)


def at_rest(full: Batch | None) -> Batch | None:
    """`full` (rank 0's; None elsewhere) without net momentum: the thermostat does not keep
    it zero, and a drift would add E v_com (and the virial times v_com) to J."""
    if full is not None:
        masses = full.atomic_masses.unsqueeze(1)
        full.velocities = full.velocities - (masses * full.velocities).sum(0) / masses.sum()
    return full


def green_kubo(flux: np.ndarray, dt_fs: float, volume: float, temperature: float) -> np.ndarray:
    """kappa(t), W/(m K), at every lag of the (T, 3) extensive flux J (eV Å/fs): the running
    integral of its autocorrelation (averaged over components and time origins). J's mean is
    zero at rest (no net momentum), so none is subtracted: a sample mean would bias kappa
    low by about 2 t / (run length)."""
    n = flux.shape[0]
    spectrum = np.fft.rfft(flux, n=2 * n, axis=0)
    acf = np.fft.irfft(np.abs(spectrum) ** 2, axis=0)[:n].sum(1) / (3 * np.arange(n, 0, -1))
    to_si = (EV * ANGSTROM / FS) ** 2 * dt_fs * FS / (volume * ANGSTROM**3 * KB_SI * temperature**2)
    integral = np.concatenate([[0.0], np.cumsum(0.5 * (acf[1:] + acf[:-1]))])
    return integral * to_si


def analyse(series: dict, temperatures: list[float], args, volume: float) -> None:
    """Print kappa at the window with its block error and the literature; plot and save."""
    flux = series["total"].numpy()
    temperature = float(np.mean(temperatures))
    kappa = green_kubo(flux, args.dt, volume, temperature)
    lag = min(round(args.window * 1000 / args.dt), len(flux) - 1)
    blocks = [
        green_kubo(part, args.dt, volume, temperature)[min(lag, len(part) - 1)]
        for part in np.array_split(flux, args.blocks)
    ]
    value, error = kappa[lag], float(np.std(blocks, ddof=1) / math.sqrt(len(blocks)))
    tau = SIGMA * ANGSTROM * math.sqrt(MASS * AMU / (EPSILON_K * KB_SI))  # LJ time, s
    unit = KB_SI / (SIGMA * ANGSTROM * tau)  # kappa* in W/(m K)
    print(f"T = {temperature:.2f} K over {len(flux)} steps of {args.dt} fs")
    print(
        f"kappa({args.window} ps) = {value:.4f} +- {error:.4f} W/(m K) "
        f"= {value / unit:.3f} +- {error / unit:.3f} kappa*"
    )
    for name, (reference, spread) in LITERATURE.items():
        off = (value / unit - reference) / math.hypot(error / unit, spread)
        print(f"  {name}: {reference} +- {spread} kappa*, {off:+.1f} sigma")
    np.savez(
        args.output + ".npz",
        time=series["time"].numpy(),
        convective=series["convective"].numpy(),
        potential=series["potential"].numpy(),
        kappa=kappa,
        temperature=temperature,
    )
    try:
        import matplotlib  # optional: the plot only

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (the series are in the .npz)")
        return
    shown = min(len(kappa), 5 * lag + 1)  # the plateau, not the noise of the longest lags
    lags = np.arange(shown) * args.dt / 1000
    figure, axis = plt.subplots(figsize=(6, 4))
    axis.plot(lags, kappa[:shown], label="running integral")
    axis.axvline(args.window, color="grey", linestyle=":", label=f"window {args.window} ps")
    for name, (reference, spread) in LITERATURE.items():
        axis.axhspan(
            (reference - spread) * unit, (reference + spread) * unit, alpha=0.3, label=name
        )
    title = f"Green–Kubo, LJ argon, {len(flux)} steps, T* {temperature / EPSILON_K:.3f}"
    axis.set(xlabel="t (ps)", ylabel="kappa (W/(m K))", title=title)
    axis.legend()
    figure.savefig(args.output + ".png", dpi=120, bbox_inches="tight")
    print(f"wrote {args.output}.png and {args.output}.npz")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=5, help="fcc cells per edge (4 atoms each)")
    parser.add_argument("--dt", type=float, default=10.0, help="time step, fs (0.0046 tau*)")
    parser.add_argument("--equilibrate", type=int, default=10_000, help="Langevin steps")
    parser.add_argument("--steps", type=int, default=90_000, help="NVE steps with the flux")
    parser.add_argument("--window", type=float, default=4.0, help="integration window, ps")
    parser.add_argument("--blocks", type=int, default=10, help="blocks for the error")
    parser.add_argument("--output", default="green_kubo_argon", help="<output>.png/.npz")
    parser.add_argument("--short", action="store_true", help="108 atoms, 300 steps (CI)")
    args = parser.parse_args()
    if args.short:
        args.cells, args.equilibrate, args.steps, args.window, args.blocks = 3, 100, 200, 0.3, 4

    manager = DistributedManager.initialize()
    try:
        epsilon = EPSILON_K * ase.units.kB
        model = LennardJonesModel(epsilon, SIGMA, CUTOFF_SIGMAS * SIGMA, shift=False)
        config = DomainConfig(cutoff=model.cutoff, skin=0.4, mesh=manager.mesh)
        full = liquid(args.cells, seed=1) if manager.rank == 0 else None
        temperature = T_STAR * EPSILON_K
        langevin = NVTLangevin(model, args.dt, temperature=temperature, friction=0.01, seed=2)
        with DomainParallel(langevin, config, n_steps=args.equilibrate) as equilibration:
            equilibration.partition(full)
            equilibration.run()
            batch = equilibration.batch
        flux, temperatures = HeatFluxLogger(), TemperatureLog()
        thermo = ThermoLogger(frequency=max(args.steps // 20, 1))  # progress, energy drift
        hooks = [flux, temperatures, thermo]
        production = DomainParallel(NVE(model, args.dt), config, args.steps, hooks)
        with production:
            production.partition(at_rest(equilibration.gather(batch, dst=0)))
            production.run()
        if manager.rank == 0:
            volume = float(torch.linalg.det(batch.cell[0]))
            analyse(flux.series(), temperatures.values, args, volume)
    finally:
        DistributedManager.cleanup()


if __name__ == "__main__":
    main()
