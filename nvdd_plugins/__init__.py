"""nvdd: domain decomposition for machine-learned interatomic potentials.

One atomic system is split across ranks; the unchanged model, hooks and integrators keep
working. Entry points: `DomainParallel` (torchrun/SLURM/mpirun), the ASE calculator
`nvdd_plugins.ase.DomainDecomposedCalculator`, and LAMMPS via `lammps_interface`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from nvdd_plugins.config import DomainConfig, StrategyKind
from nvdd_plugins.data import AtomicData, Batch
from nvdd_plugins.distributed_model import (
    ChunkedEvaluator,
    DistributedModel,
    OneProcessEvaluator,
    ReplicatedModel,
)
from nvdd_plugins.dynamics import set_default_evaluator
from nvdd_plugins.parallel import DistributedManager, DomainParallel, HookScope

try:
    __version__ = version("nvdd")  # the distribution's version (pyproject.toml)
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

# an integrator run on its own evaluates through the same engine as DomainParallel at one rank
set_default_evaluator(OneProcessEvaluator)

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
    "__version__",
]
