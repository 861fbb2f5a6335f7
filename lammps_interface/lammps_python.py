"""LAMMPS's Python module, or stand-ins where it is not installed.

Writing a model file (`MLIAPModel(...).pickle(path)`, `python -m lammps_interface`) needs no
LAMMPS: the file names its class, and LAMMPS's Python resolves the real base class when it
loads it. Reaching a running LAMMPS (`attach`) needs the module, and says how to get it.
"""

from __future__ import annotations

import pickle
from typing import Any

__all__ = ["LAMMPS_MISSING", "MLIAPUnified", "lammps"]

LAMMPS_MISSING = (
    "LAMMPS's Python module is not importable here ({error}): it comes with a LAMMPS built "
    "with the PYTHON and ML-IAP packages (`make install` builds one into .venv, "
    "scripts/install_lammps.sh), or put that LAMMPS's python/ directory on PYTHONPATH and "
    "its liblammps on LD_LIBRARY_PATH. Writing a model file does not need it."
)

try:
    from lammps import lammps
    from lammps.mliap.mliap_unified_abc import MLIAPUnified
except ImportError as missing:
    _error = str(missing)

    class MLIAPUnified:  # type: ignore[no-redef]
        """The fields of LAMMPS's `MLIAPUnified` that `pair_style mliap unified` reads from
        a loaded model, and its `pickle`."""

        def __init__(
            self,
            interface: Any = None,
            element_types: Any = None,
            ndescriptors: int | None = None,
            nparams: int | None = None,
            rcutfac: float | None = None,
        ) -> None:
            self.interface = interface
            self.element_types = element_types
            self.ndescriptors = ndescriptors
            self.nparams = nparams
            self.rcutfac = rcutfac

        def pickle(self, fname: str) -> None:
            """Write the model for `pair_style mliap unified <fname> 0`."""
            with open(fname, "wb") as out:
                pickle.dump(self, out)

    class lammps:  # type: ignore[no-redef]
        """Stands for LAMMPS's `lammps` class: making one says how to install LAMMPS."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise ImportError(LAMMPS_MISSING.format(error=_error))
