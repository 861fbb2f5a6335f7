"""nvdd: domain decomposition for machine-learned interatomic potentials.

One atomic system is split across ranks; the unchanged model, hooks and integrators keep
working. Entry points: `DomainParallel` (torchrun/SLURM/mpirun), the ASE calculator
`nvdd_plugins.ase.DomainDecomposedCalculator`, and LAMMPS via `lammps_interface`.
"""

from __future__ import annotations

from nvdd_plugins.config import DomainConfig, StrategyKind
from nvdd_plugins.data import AtomicData, Batch
from nvdd_plugins.distributed_model import ChunkedEvaluator, DistributedModel, ReplicatedModel
from nvdd_plugins.parallel import DistributedManager, DomainParallel, HookScope

__all__ = [
    "AtomicData",
    "Batch",
    "ChunkedEvaluator",
    "DistributedManager",
    "DistributedModel",
    "DomainConfig",
    "DomainParallel",
    "HookScope",
    "ReplicatedModel",
    "StrategyKind",
]
