"""ASE integration: `DomainDecomposedCalculator` for scripts run under mpirun."""

from __future__ import annotations

from nvdd_plugins.ase.calculator import DomainDecomposedCalculator

__all__ = ["DomainDecomposedCalculator"]
