"""How each wrapper loads a saved model, and a hint where plain `torch.load` fails on one.

Since torch 2.6 `torch.load(path)` loads weights only; a file holding a whole model (what
mace-torch, sevenn, nequip and fairchem save) then fails with an `UnpicklingError` naming a
class of the package that wrote it. An uncaught such error gets a note naming the loader.
"""

from __future__ import annotations

import pickle
import re
import sys
from types import TracebackType

__all__ = ["LOADERS", "install_load_hint", "loader_hint"]

LOADERS = {
    "mace": "MACEWrapper.from_file(path)",
    "sevenn": "SevenNetWrapper(sevenn.util.model_from_checkpoint(path)[0])",
    "nequip": "NequIPWrapper(nequip.model.saved_models.load_saved_model(path))",
    "allegro": "AllegroWrapper(nequip.model.saved_models.load_saved_model(path))",
    "fairchem": 'UMAWrapper.from_checkpoint(path, task_name="omat")',
    "aimnet": "AIMNet2Wrapper.from_calculator(aimnet.calculators.AIMNet2Calculator(path))",
}
"""The package a saved model's classes come from -> how nvdd loads the model."""

_GLOBAL = re.compile(r"GLOBAL (\w+)[.\w]* was not an allowed global")


def loader_hint(error: BaseException) -> str | None:
    """The note for a weights-only `torch.load` failure on a model file of a package that
    has a loader, else None."""
    if not isinstance(error, pickle.UnpicklingError):
        return None
    found = _GLOBAL.search(str(error))
    if found is None or found.group(1) not in LOADERS:
        return None
    return (
        f"nvdd: this file holds a whole {found.group(1)} model, which torch.load reads only "
        f"with weights_only=False (trusted files only); load it with {LOADERS[found.group(1)]}"
    )


def install_load_hint() -> None:
    """Add the loader's note to an uncaught `torch.load` failure on a model file (the
    exception hook that is in place prints it). Installing twice is a no-op."""
    previous = sys.excepthook
    if getattr(previous, "_nvdd_load_hint", False):
        return

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        hint = loader_hint(value)
        if hint is not None and hint not in getattr(value, "__notes__", ()):
            value.add_note(hint)
        previous(kind, value, tb)

    hook._nvdd_load_hint = True  # type: ignore[attr-defined]
    sys.excepthook = hook
