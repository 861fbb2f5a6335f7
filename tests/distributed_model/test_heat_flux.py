"""Per-atom heat-flux tensors under domain decomposition equal the single-process values on
the unfolded system atom by atom (float64, 1, 2 and 4 simulated ranks; periodic triclinic,
self-images, slab, cluster; LJ, the 3-layer MPNN, MACE), and the terms a naive version
drops are what makes them exact (negative controls)."""

from __future__ import annotations

import pytest
import torch

import nvdd_plugins.distributed_model.evaluation.heat_flux as evaluation_flux
from nvdd_plugins import Batch, DomainConfig, DomainParallel, HookScope, ReplicatedModel
from nvdd_plugins.comm import LocalCommunicator, run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.dynamics import NVE, HeatFluxLogger
from nvdd_plugins.models import HEAT_FLUX_TENSORS, BaseModelMixin, SimpleMPNN, evaluate_model
from nvdd_plugins.models.mpnn import _Interaction
from tests.helpers.oracle import replicated
from tests.helpers.systems import SYSTEMS, lj_model, mpnn_model

TENSOR_TOL = 1e-10  # eV, per atom and component
PROPERTIES = ("energy", "forces", HEAT_FLUX_TENSORS)
RANKS = (1, 2, 4)
LJ_MODEL = lj_model()


def _tiny_mace() -> BaseModelMixin:
    pytest.importorskip("mace")
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    return MACEWrapper(tiny_mace())


def _atoms(model_name: str, system: str):
    atoms = SYSTEMS[system]()
    if model_name == "mace":
        from tests.helpers.mace_models import with_two_species

        atoms = with_two_species(atoms)
    return atoms


_ORACLE: dict[tuple[str, str], torch.Tensor] = {}  # by (model, system): computed once


def _oracle(model: BaseModelMixin, atoms) -> torch.Tensor:
    key = (type(model).__name__, atoms.get_chemical_formula() + str(atoms.positions.sum()))
    if key not in _ORACLE:
        _ORACLE[key] = evaluate_model(model, Batch.from_atoms(atoms), PROPERTIES)[HEAT_FLUX_TENSORS]
    return _ORACLE[key]


def _deviations(model: BaseModelMixin, atoms, world_size: int) -> list[float]:
    """Each rank's largest deviation of the heat-flux tensors from the oracle's."""
    ref = _oracle(model, atoms)
    results = run_simulated(world_size, lambda comm: replicated(comm, model, atoms, PROPERTIES))
    return [float((r[HEAT_FLUX_TENSORS] - ref).abs().max()) for r in results]


CASES = [
    *((model, system) for model in ("lj", "mpnn") for system in SYSTEMS),
    ("mace", "bulk"),
    pytest.param("mace", "slab", marks=pytest.mark.slow),  # MACE's open axis: as the MPNN's
]
MODELS = {"lj": lj_model, "mpnn": mpnn_model, "mace": _tiny_mace}


@pytest.mark.parametrize("world_size", RANKS)
@pytest.mark.parametrize(("model_name", "system"), CASES)
def test_tensors_equal_the_unfolded_oracle(model_name: str, system: str, world_size: int) -> None:
    model = MODELS[model_name]()
    worst = max(_deviations(model, _atoms(model_name, system), world_size))
    print(f"{model_name}/{system} at {world_size} ranks: {worst:.1e} eV")
    assert worst < TENSOR_TOL


@pytest.mark.parametrize("world_size", RANKS)
def test_without_the_image_terms_a_periodic_multilayer_model_is_wrong(
    world_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropping Psi (the image shifts of what crossed a refresh from a periodic image) leaves
    the 3-layer MPNN on a periodic box off by lattice-vector terms at every rank count (at
    one rank its self-images are refreshed too); LJ (nothing refreshed but the positions)
    and an open cluster (no image shifts) stay exact, which is why they cannot tell."""
    monkeypatch.setattr(evaluation_flux, "image_terms", lambda taps: taps.offsets.new_zeros(3))
    mpnn, lj = mpnn_model(), lj_model()
    wrong = max(_deviations(mpnn, SYSTEMS["bulk"](), world_size))
    print(f"mpnn/bulk without Psi at {world_size} ranks: {wrong:.1e} eV")
    assert wrong > 1e4 * TENSOR_TOL
    assert max(_deviations(lj, SYSTEMS["bulk"](), world_size)) < TENSOR_TOL
    assert max(_deviations(mpnn, SYSTEMS["cluster"](), world_size)) < TENSOR_TOL


def test_without_the_shift_in_maces_own_exchange_it_is_wrong(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MACE's owned-rows path exchanges node features inside its own autograd function,
    where no refresh can be tapped: the image shift is applied in that exchange's backward
    (`FluxTaps.adjoint_of`, once per exchange and rank). Without it MACE is wrong."""
    model, atoms = _tiny_mace(), _atoms("mace", "bulk")
    counted = []
    exchanged = evaluation_flux.FluxTaps.exchanged

    def counting(taps, refreshed):
        counted.append(1)
        return exchanged(taps, refreshed)

    monkeypatch.setattr(evaluation_flux.FluxTaps, "exchanged", counting)
    assert max(_deviations(model, atoms, 2)) < TENSOR_TOL
    assert len(counted) == 2  # one exchange per forward on each rank

    def unshifted(taps, grad):
        taps._pending -= 1
        if taps._recording:
            taps._exchange_adjoints[taps._pending] = grad.detach().clone()
        return grad

    monkeypatch.setattr(evaluation_flux.FluxTaps, "adjoint_of", unshifted)
    wrong = max(_deviations(model, atoms, 2))
    print(f"mace/bulk without the exchange's shift at 2 ranks: {wrong:.1e} eV")
    assert wrong > 1e4 * TENSOR_TOL


@pytest.mark.parametrize("system", ["bulk", "cluster"])
def test_without_the_ghost_rows_tensors_are_wrong(
    system: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ghost rows' tensors are owed to their owners: keeping the owned rows only breaks
    DD = one process, periodic or not."""
    tensors = evaluation_flux.FluxTaps.tensors

    def owned_rows_only(taps, energies, gradient):
        found = tensors(taps, energies, gradient)
        return torch.where(torch.arange(found.shape[0]).view(-1, 1, 1) < taps.n_owned, found, 0)

    monkeypatch.setattr(evaluation_flux.FluxTaps, "tensors", owned_rows_only)
    wrong = max(_deviations(mpnn_model(), SYSTEMS[system](), 2))
    print(f"mpnn/{system} without ghost rows at 2 ranks: {wrong:.1e} eV")
    assert wrong > 1e4 * TENSOR_TOL


def test_the_first_request_images_every_periodic_axis() -> None:
    """One rank on a wide periodic box wraps its pairs across the faces; asking for the heat
    flux rebuilds it with self-image ghosts, and forces stay those of the oracle."""
    model, atoms = mpnn_model(), SYSTEMS["bulk"]()
    atoms = atoms * (2, 1, 1)  # 34 Å along x: wider than twice the halo, so x wraps
    config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=LocalCommunicator())
    distributed = ReplicatedModel(model, config)
    batch = Batch.from_atoms(atoms)
    distributed(batch, ("energy", "forces"))
    assert bool(distributed.domain.view.wrapped_axes[0])
    result = distributed(batch, PROPERTIES)
    assert not bool(distributed.domain.view.wrapped_axes.any())
    ref = evaluate_model(model, batch, PROPERTIES)
    assert float((result["forces"] - ref["forces"]).abs().max()) < 1e-8
    assert float((result[HEAT_FLUX_TENSORS] - ref[HEAT_FLUX_TENSORS]).abs().max()) < TENSOR_TOL


class _AddsInPlace(_Interaction):
    """A layer that adds to its aggregation result in place after the scatter."""

    def forward(self, h, radial, envelope, receivers, senders):
        weight = self.filter(radial) * envelope.unsqueeze(-1)
        messages = torch.nn.functional.silu(self.message(h[senders])) * weight
        aggregated = h.new_zeros(h.shape).index_add_(0, receivers, messages)
        aggregated += 1.0
        return h + torch.nn.functional.silu(self.update(torch.cat([h, aggregated], dim=-1)))


def test_refusals() -> None:
    """Where the heat flux is not computed, a clear error instead of a wrong number."""
    atoms = SYSTEMS["bulk"]()
    model = SimpleMPNN(cutoff=4.5, hidden=8, n_layers=2, seed=1).double()
    model.layers[1].__class__ = _AddsInPlace

    def run(comm):
        replicated(comm, model, atoms, PROPERTIES)

    with pytest.raises(RuntimeError, match=r"DistributionRuleError.*in place afterwards"):
        run_simulated(2, run)
    with pytest.raises(ValueError, match="chunk_atoms"):
        replicated(LocalCommunicator(), mpnn_model(), atoms, PROPERTIES, chunk_atoms=64)
    with pytest.raises(ValueError, match="compile=True"):
        replicated(LocalCommunicator(), lj_model(), atoms, PROPERTIES, compile=True)
    with pytest.raises(ValueError, match="halo strategy"):
        graph = StrategyKind.GRAPH_PARTITION
        replicated(LocalCommunicator(), mpnn_model(), atoms, PROPERTIES, strategy=graph)


def test_the_logger_refuses_a_gathered_scope() -> None:
    """Under DomainParallel the hook needs its rank's own results (LOCAL scope)."""
    full = Batch.from_atoms(SYSTEMS["bulk"]())
    full.add_node_property("velocities", torch.zeros_like(full.positions))

    def run(comm):
        config = DomainConfig(cutoff=LJ_MODEL.cutoff, skin=0.3, mesh=comm)
        dynamics = DomainParallel(NVE(LJ_MODEL, 2.0), config, 1)
        dynamics.attach(HeatFluxLogger(), scope=HookScope.GLOBAL)
        dynamics.partition(full.copy() if comm.rank == 0 else None)
        dynamics.run()

    with pytest.raises(RuntimeError, match="do not give it DomainParallel scope"):
        run_simulated(2, run)
