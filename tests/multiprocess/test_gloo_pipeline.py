"""`DomainPipeline` over a 2 × 2 (pipeline, domain) mesh of real gloo ranks: FIRE then
Nosé–Hoover NVT, each stage decomposed over its two ranks, equals the two run one after the
other in one process; a 2-D mesh where one group is expected is refused clearly."""

from __future__ import annotations

import numpy as np
import pytest
from ase.md.velocitydistribution import thermalize_momenta
from torch.distributed.device_mesh import init_device_mesh

from nvdd_plugins import Batch, DistributedModel, DomainConfig
from nvdd_plugins.comm import Communicator
from nvdd_plugins.dynamics import FIRE, NoseHoover
from nvdd_plugins.parallel import DomainPipeline, PipelineMesh, Stage
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import on_the_oracle
from tests.helpers.systems import MD_SKIN, lj_model, triclinic_bulk

pytestmark = pytest.mark.multiprocess

NVT_STEPS = 40


def _stages() -> list[Stage]:
    model = lj_model()
    return [
        Stage(lambda: FIRE(model, fmax=1e-2, skin=MD_SKIN), n_steps=500, name="relax"),
        Stage(lambda: NoseHoover(model, 4.0, 300.0, 100.0, skin=MD_SKIN), NVT_STEPS, name="nvt"),
    ]


def _systems() -> list[Batch]:
    systems = []
    for seed in (0, 1):
        atoms = triclinic_bulk(seed)
        thermalize_momenta(atoms, temperature_K=300, rng=np.random.default_rng(seed))
        systems.append(Batch.from_atoms(atoms))
    return systems


def _refusal(mesh) -> str:
    try:
        DistributedModel(lj_model(), DomainConfig(cutoff=6.0, mesh=mesh))
    except ValueError as err:
        return str(err)
    return "accepted"


def _pipeline(comm: Communicator) -> dict:
    device_mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pipeline", "domain"))
    mesh = PipelineMesh.from_device_mesh(device_mesh)
    pipeline = DomainPipeline(_stages(), mesh, cutoff=lj_model().cutoff, skin=MD_SKIN)
    finished = pipeline.run(_systems() if comm.rank == 0 else None)
    return {
        "finished": finished,
        "records": pipeline.records,
        "stage": mesh.stage,
        "domain_rank": mesh.domain.rank,
        "refused": [_refusal(device_mesh), _refusal(mesh)],
    }


def test_fire_then_nvt_over_a_pipeline_of_domain_decomposed_stages() -> None:
    reports = run_gloo(4, _pipeline, timeout=240)
    expected, steps = [], []
    for system in _systems():
        relax, nvt = (on_the_oracle(stage.dynamics()) for stage in _stages())
        relax.run(system, 500)
        for name in relax.compute_properties:
            system.pop(name)
        nvt.run(system, NVT_STEPS)
        expected.append(system)
        steps.append(relax.step_count)
    assert all(5 < s < 500 for s in steps), steps
    for report in reports:
        stage, root = report["stage"], report["domain_rank"] == 0
        if stage == 0:
            assert [r["steps"] for r in report["records"]] == steps
            assert all(r["converged"] for r in report["records"])
        assert len(report["finished"]) == (2 if stage == 1 and root else 0)
        for refusal in report["refused"]:
            assert "2-D mesh" in refusal and "mesh['domain']" in refusal, refusal
    (final,) = [r["finished"] for r in reports if r["stage"] == 1 and r["domain_rank"] == 0]
    for got, want in zip(final, expected, strict=True):
        assert float((got.positions - want.positions).abs().max()) < 1e-8
        assert float((got.velocities - want.velocities).abs().max()) < 1e-8
