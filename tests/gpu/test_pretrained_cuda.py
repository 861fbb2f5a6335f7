"""The pretrained SevenNet-0 and CHGNet 0.3.0 on the GPU, float32 as trained: nvdd at 1, 2 and
4 ranks sharing the GPU (gloo processes) equals each package's own ASE calculator on the GPU
(energy, forces, stress; CHGNet's magnetic moments too) on MgO in bulk, as a slab and in a
triclinic cell; SevenNet-0 also through sevenn's cuEquivariance tensor products on both
sides."""

from __future__ import annotations

import copy
import importlib.util

import numpy as np
import pytest
import torch

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import Communicator, SimulatedMesh
from tests.helpers.chgnet_models import boxed
from tests.helpers.materials import MATERIALS
from tests.helpers.multiprocess import run_gloo

PACKAGES = {"sevennet0": "sevenn", "sevennet0_cueq": "cuequivariance_torch", "chgnet": "chgnet"}

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _wrapper_and_calculator(name: str):
    """nvdd's wrapper and the package's own calculator, both float32 on the GPU."""
    if name.startswith("sevennet0"):
        from sevenn.calculator import SevenNetCalculator

        from nvdd_plugins.models import SevenNetWrapper

        if name.endswith("_cueq"):  # their calculator builds its own cuEquivariance copy
            wrapper = SevenNetWrapper.from_pretrained("7net-0", cueq=True).to("cuda")
            return wrapper, SevenNetCalculator("7net-0", device="cuda", enable_cueq=True)
        wrapper = SevenNetWrapper.from_pretrained("7net-0").to("cuda")
        theirs = SevenNetCalculator(
            copy.deepcopy(wrapper.model), file_type="model_instance", device="cuda"
        )
        return wrapper, theirs
    from chgnet.model import CHGNetCalculator

    from nvdd_plugins.models import CHGNetWrapper

    wrapper = CHGNetWrapper.from_pretrained("0.3.0").to("cuda")
    return wrapper, CHGNetCalculator(copy.deepcopy(wrapper.model), use_device="cuda")


def check_rank(comm: Communicator, name: str) -> dict[str, dict[str, float]]:
    """Per system: the largest differences from the package's calculator (energy per atom,
    forces, stress)."""
    wrapper, theirs = _wrapper_and_calculator(name)
    report = {}
    for system in ("bulk", "slab", "triclinic"):
        atoms = MATERIALS[system]()
        properties = ("energy", "forces", "stress") if atoms.pbc.all() else ("energy", "forces")
        if name == "chgnet":
            properties = (*properties, "magmoms")
        config = DomainConfig(cutoff=wrapper.cutoff, skin=0.5, mesh=comm)
        batch = Batch.from_atoms(atoms, device="cuda", dtype=torch.float32)
        ours = ReplicatedModel(wrapper, config)(batch, properties)
        shipped = boxed(atoms) if name == "chgnet" else atoms.copy()  # pymatgen: periodic
        shipped.calc = theirs
        errs = {
            "energy": abs(float(ours["energy"].double().sum()) - shipped.get_potential_energy())
            / len(atoms),
            "forces": float(
                np.abs(ours["forces"].double().cpu().numpy() - shipped.get_forces()).max()
            ),
        }
        if "stress" in properties:
            stress = ours["stress"][0].double().cpu().numpy()
            errs["stress"] = float(np.abs(stress - shipped.get_stress(voigt=False)).max())
        if "magmoms" in properties:
            magmoms = ours["magmoms"].double().cpu().numpy()
            errs["magmoms"] = float(np.abs(magmoms - shipped.get_magnetic_moments()).max())
        report[system] = errs
    return report


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_pretrained_on_the_gpu_equals_the_package(name: str, world_size: int) -> None:
    for package in {PACKAGES[name], "sevenn" if name.startswith("sevennet") else "chgnet"}:
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"needs {package}")
    if world_size == 1:
        reports = [check_rank(SimulatedMesh(1).communicator(0), name)]
    else:
        reports = run_gloo(world_size, check_rank, name, timeout=400, start_method="spawn")
    for rank, report in enumerate(reports):
        print(name, rank, report)
        for system, errs in report.items():
            assert errs["energy"] < 1e-5, (rank, system, errs)
            # float32 on both sides, summed in different orders: CHGNet's forces differ
            # by up to 1.4e-4 eV/Å on the slab in one process (a lost halo gives 1e-2)
            assert errs["forces"] < 5e-4, (rank, system, errs)
            assert errs.get("stress", 0.0) < 1e-5, (rank, system, errs)
            assert errs.get("magmoms", 0.0) < 1e-4, (rank, system, errs)
