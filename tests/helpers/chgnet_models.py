"""The pretrained CHGNets from chgnet's wheel for tests, and chgnet's own results for them."""

from __future__ import annotations

import functools
from unittest import mock

import torch
from ase import Atoms

from nvdd_plugins.models.chgnet import CHGNetWrapper

GPA = 1.0 / 160.21766208  # eV/Å³ per GPa, chgnet's own factor
TOLERANCES = {"energy": 1e-10, "energies": 1e-10, "forces": 1e-8, "magmoms": 1e-10, "stress": 1e-9}


def chgnet_properties(atoms: Atoms) -> tuple[str, ...]:
    """Energy, forces and magnetic moments, plus stress for a cell periodic along all axes
    (chgnet's stress of a slab includes its vacuum)."""
    periodic = atoms.cell.rank == 3 and all(atoms.pbc)
    base = ("energy", "forces", "magmoms")
    return (*base, "stress") if periodic else base


def assert_chgnet_close(errs: dict[str, float], label: str = "") -> None:
    """Every deviation of `results_close` within `TOLERANCES`."""
    assert all(errs[key] < TOLERANCES[key] for key in errs), (label, errs)


@functools.cache
def pretrained_chgnet(name: str = "0.3.0", dtype: torch.dtype = torch.float64) -> CHGNetWrapper:
    """The pretrained CHGNet `name`, loaded once a process."""
    return CHGNetWrapper.from_pretrained(name, dtype)


def boxed(atoms: Atoms, vacuum: float = 8.0) -> Atoms:
    """`atoms` as chgnet needs them (pymatgen structures are periodic): a cluster gets a
    cell with `vacuum` Å around it, wider than chgnet's 6 Å cutoff, so no image interacts.
    A slab keeps its cell (its vacuum already exceeds the cutoff)."""
    if atoms.cell.rank == 3:
        out = atoms.copy()
    else:
        out = atoms.copy()
        out.center(vacuum=vacuum)
    out.pbc = True
    return out


def chgnet_reference(model: torch.nn.Module, atoms: Atoms) -> dict[str, torch.Tensor]:
    """Energy, per-atom energies, forces, magnetic moments and stress (cells with a volume)
    from chgnet's own graph converter (pymatgen's neighbour list) and forward (its autograd
    force/stress head), in the model's dtype: chgnet's graph tensors, made float32 by
    chgnet, are built in float64 for a float64 model."""
    from chgnet.graph import converter as chgnet_converter
    from chgnet.model import model as chgnet_model
    from chgnet.model.composition_model import AtomRef
    from pymatgen.io.ase import AseAtomsAdaptor

    dtype = next(model.parameters()).dtype
    structure = AseAtomsAdaptor.get_structure(boxed(atoms))
    compositions = AtomRef._assemble_graphs  # chgnet makes them float32

    def in_dtype(self: AtomRef, graphs: list) -> torch.Tensor:
        return compositions(self, graphs).to(dtype)

    with (
        mock.patch.object(chgnet_converter, "TORCH_DTYPE", dtype),
        mock.patch.object(chgnet_model, "TORCH_DTYPE", dtype),
        mock.patch.object(AtomRef, "_assemble_graphs", in_dtype),
    ):
        graph = model.graph_converter(structure)
        prediction = model([graph], task="efsm", return_site_energies=True)
    n = len(atoms)
    energies = prediction["site_energies"][0].detach().double()
    # chgnet's total (its per-atom mean times n) holds its composition fractions in float32
    energy = prediction["e"][0].detach().double() * (n if model.is_intensive else 1)
    assert abs(float(energy) - float(energies.sum())) < 1e-6 * n
    ref = {
        "energy": energies.sum().reshape(1),
        "energies": energies,
        "forces": prediction["f"][0].detach().double(),
        "magmoms": prediction["m"][0].detach().double(),
    }
    if atoms.cell.rank == 3 and all(atoms.pbc):
        ref["stress"] = (prediction["s"][0].detach().double() * GPA).unsqueeze(0)
    return ref


def results_close(result: dict, ref: dict, n_atoms: int) -> dict[str, float]:
    """Max deviations, magnetic moments included."""
    out = {
        "energy": float((result["energy"] - ref["energy"]).abs().max()) / n_atoms,
        "energies": float((result["energies"] - ref["energies"]).abs().max()),
        "forces": float((result["forces"] - ref["forces"]).abs().max()),
        "magmoms": float((result["magmoms"] - ref["magmoms"]).abs().max()),
    }
    if "stress" in ref:
        out["stress"] = float((result["stress"] - ref["stress"]).abs().max())
    return out
