"""nvalchemi's spellings that nvdd accepts (docs/migration.md lists every difference)."""

from __future__ import annotations

import re

import pytest
import torch
from ase.build import bulk

import nvdd_plugins
from nvdd_plugins import AtomicData, Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.dynamics import FIRE, FIRESettings
from nvdd_plugins.parallel import DistributedPipeline, DomainPipeline
from tests.helpers.systems import lj_model


def test_fire_says_where_nvalchemis_parameters_went() -> None:
    for name, value in (("f_alpha", 0.9), ("f_inc", 1.2), ("dt_max", 1.0)):
        with pytest.raises(TypeError, match=re.escape("settings=FIRESettings(")):
            FIRE(lj_model(), **{name: value})
    with pytest.raises(TypeError, match=re.escape("FIRESettings(dtmax=dt_max / ase.units.fs")):
        FIRE(lj_model(), dt_max=1.0)
    settings = FIRESettings(fa=0.9, finc=1.2)
    assert FIRE(lj_model(), settings=settings).settings == settings


def test_domain_config_takes_nvalchemis_names() -> None:
    assert DomainConfig(cutoff=5.0, grid_dims=(2, 1, 1)).grid == (2, 1, 1)
    with pytest.raises(ValueError, match="not both"):
        DomainConfig(cutoff=5.0, grid=(2, 1, 1), grid_dims=(2, 1, 1))
    assert DomainConfig(cutoff=5.0, skin=0.5, ghost_width=6.0).halo_width == 5.5
    with pytest.raises(ValueError, match="thinner than the ghost shell"):
        DomainConfig(cutoff=5.0, skin=0.5, ghost_width=5.0)
    with pytest.raises(ValueError, match="needs a DeviceMesh"):
        DomainConfig(cutoff=5.0, mesh_dim="domain")


def test_mesh_dim_picks_the_named_dimension() -> None:
    class Mesh:  # a DeviceMesh's indexing by dimension name
        mesh_dim_names = ("pipeline", "domain")

        def __getitem__(self, name: str) -> str:
            return f"{name} group"

    assert DomainConfig(cutoff=5.0, mesh=Mesh(), mesh_dim="domain").mesh == "domain group"


def test_an_energy_column_is_a_scalar_per_system() -> None:
    atoms = bulk("Ar", "fcc", a=5.26)
    data = AtomicData.from_atoms(atoms)
    data.add_system_property("energy", torch.zeros(1, 1, dtype=torch.float64))
    assert Batch.from_data_list([data, data]).energy.shape == (2,)


def test_distributed_pipeline_is_domain_pipeline() -> None:
    assert DistributedPipeline is DomainPipeline
    assert nvdd_plugins.parallel.DistributedPipeline is DomainPipeline


def test_step_returns_the_batch_and_convergence_and_gather_takes_dst() -> None:
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True) * (3, 3, 3)
    atoms.rattle(0.05, seed=1)

    def run(comm):
        model = lj_model()
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm)
        with DomainParallel(FIRE(model, fmax=10.0), config) as dd:
            owned = dd.partition(Batch.from_atoms(atoms) if comm.rank == 0 else None)
            batch, converged = dd.step()
            full = dd.gather(batch, dst=1)
        return batch is owned, converged, None if full is None else full.num_nodes

    assert run_simulated(2, run) == [(True, True, None), (True, True, len(atoms))]
