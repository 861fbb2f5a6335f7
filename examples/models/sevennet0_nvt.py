"""NVT molecular dynamics of MgO with the pretrained SevenNet-0, domain-decomposed, and the
check that the ranks' final state equals one process (`make demo` runs it at 2 ranks).

    make install-e3nn  # once: sevenn in an overlay environment
    .venv-e3nn/bin/torchrun --nproc_per_node=2 examples/models/sevennet0_nvt.py [--steps 20]

SevenNet-0 (sevenn 0.13.0's wheel, `SevenNetWrapper.from_pretrained("7net-0")`: 5
equivariant convolutions, 5 Å cutoff, trained on the Materials Project) runs on a rocksalt
MgO crystal at its own lattice constant (4.2547 Å), Langevin thermostat at 300 K, in float64
(sevenn itself computes in float32; float64 makes the 2-rank vs 1-process check exact to
rounding). The crystal starts on its lattice sites with 300 K Maxwell-Boltzmann velocities,
so about half of the kinetic energy flows into the potential energy within the first ~50 fs
(the temperature falls towards 150 K) before the thermostat heats it back. At the end rank 0
recomputes the final state in one process and prints the largest differences.
"""

from __future__ import annotations

import argparse
import time
import warnings

# known warnings of the dependencies, silenced at the source: sevenn's note that no
# GPU tensor-product accelerator (cuEquivariance, FlashTP) is in use, and e3nn's TorchScript
# notes while sevenn builds its model
warnings.filterwarnings("ignore", message=".*(cuEquivariance|FlashTP|OpenEquivariance).*")
warnings.filterwarnings("ignore", category=UserWarning, module=r"(e3nn|torch\.jit)\..*")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from ase.build import bulk  # noqa: E402
from ase.md.velocitydistribution import thermalize_momenta  # noqa: E402
from ase.parallel import DummyMPI  # noqa: E402

from nvdd_plugins import Batch, DistributedManager, DomainConfig, DomainParallel  # noqa: E402
from nvdd_plugins.dynamics import NVTLangevin, ThermoLogger  # noqa: E402
from nvdd_plugins.models import SevenNetWrapper, evaluate_model  # noqa: E402

LATTICE = 4.2547  # Å, SevenNet-0's own MgO lattice constant (docs/sevennet.md)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=3, help="rocksalt cells per axis (8 atoms)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--temperature", type=float, default=300.0, help="K")
    args = parser.parse_args()

    manager = DistributedManager.initialize()
    try:
        model = SevenNetWrapper.from_pretrained("7net-0", dtype=torch.float64).to(manager.device)
        integrator = NVTLangevin(model, 2.0, temperature=args.temperature, friction=0.02, seed=1)
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=manager.mesh)
        hooks = [ThermoLogger(frequency=2)]
        full = None
        if manager.rank == 0:
            atoms = bulk("MgO", "rocksalt", a=LATTICE, cubic=True) * ((args.cells,) * 3)
            # rank 0 alone draws (ASE's default comm would make the draw an MPI collective)
            rng = np.random.default_rng(0)
            thermalize_momenta(atoms, temperature_K=args.temperature, rng=rng, comm=DummyMPI())
            full = Batch.from_atoms(atoms).to(manager.device, torch.float64)
        with DomainParallel(integrator, config, n_steps=args.steps, hooks=hooks) as dynamics:
            owned = dynamics.partition(full)
            if manager.rank == 0:
                grid = dynamics.model.domain.partitioner.grid
                layers = model.distribution_spec().n_layers
                print(
                    f"SevenNet-0 (sevenn 7net-0, float64) on rocksalt MgO, {full.num_nodes} "
                    f"atoms, {manager.world_size} ranks, halo strategy (rank grid {grid}, ghosts "
                    f"refreshed after each of {layers} convolutions), NVT {args.temperature:g} K",
                    flush=True,
                )
            start = time.perf_counter()
            owned = dynamics.run(owned)
            elapsed = time.perf_counter() - start
            final = dynamics.gather(owned, dst=0)
        if manager.rank == 0:
            one = evaluate_model(model, final, ("energy", "forces"))
            energy_error = abs(float(one["energy"][0]) - float(final.energy.sum()))
            force_error = float((one["forces"] - final.forces).abs().max())
            print(f"{args.steps} steps in {elapsed:.1f} s")
            print(
                f"final state, {manager.world_size} ranks vs 1 process: |dE| = "
                f"{energy_error:.1e} eV, max |dF| = {force_error:.1e} eV/Å"
            )
    finally:
        DistributedManager.cleanup()


if __name__ == "__main__":
    main()
