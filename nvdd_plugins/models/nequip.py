"""`NequIPWrapper` and `AllegroWrapper`: models of the nequip framework (nequip, allegro).

Both packages build a `GraphModel` around nequip's `ForceStressOutput` around the energy
layers (a `SequentialGraphNetwork`). The wrapper hands those layers the prebuilt graph: atom
types, `edge_index` and the edge vectors `x[j] - x[i] + shifts` for each edge (i, j) (nequip's
own convention: `edge_index[0]` is the centre), and runs them up to the per-atom energies
(pair potentials included); nequip's total-energy sum and its force/stress head are skipped,
since the framework sums the energies and derives forces and stress by autograd.

The two architectures distribute differently (docs/nequip.md):

* NequIP passes messages: each convolution sums messages onto `edge_index[0]` through
  nequip's `scatter` (`_tp_scatter_base`), marked as a node aggregation, so ghost rows are
  refreshed after every layer (`nequip_spec`).
* Allegro is strictly local: its layers update features of edges, and the only sums onto
  atoms (environment weights, per-edge energies) are read back by edges of the same centre
  atom or are the per-atom energies themselves. An owned atom's energy depends only on its
  own edges, which every rank holds, so nothing is refreshed between layers: one cutoff of
  ghosts and no exchange inside the forward (`allegro_spec`, `n_layers` = 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from ase.data import atomic_numbers as number_of_symbol
from torch import nn

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.models.base import (
    BaseModelMixin,
    ModelConfig,
    NeighborConfig,
    host_checks_allowed,
)
from nvdd_plugins.models.species import require_species, species_lookup
from nvdd_plugins.spec import (
    ENERGY_KINDS,
    SPEC_MPNN_HALO,
    DistributionSpec,
    HaloStoragePolicy,
    MLIPSpec,
    PythonAdapter,
    for_strategy,
    scattered_onto_nodes,
)

__all__ = [
    "AllegroWrapper",
    "NequIPWrapper",
    "allegro_spec",
    "marked_scatter",
    "nequip_spec",
]

# the inputs the wrapper gives the energy layers (and nequip's GraphModel always accepts)
_GIVEN_INPUTS = {
    "pos",
    "edge_index",
    "edge_transpose_perm",
    "edge_cell_shift",
    "edge_vectors",
    "cell",
    "batch",
    "num_atoms",
    "atom_types",
    "lmp_mliap_data",
    "num_local_ghost_atoms",
}


class NequIPWrapper(nn.Module, BaseModelMixin):
    """Wrap a nequip-framework `GraphModel` (a NequIP model; Allegro: `AllegroWrapper`).

    Args:
        model: the `GraphModel` from nequip's model builders (`NequIPGNNModel`, ...), a
            checkpoint or a package (eager, float32 or float64, e3nn tensor products).
        chemical_symbols: the element of each of the model's types, in the order of its
            `type_names` (default: the type names, which must then be element symbols).

    For inference, as nequip's calculator: the model's parameters are frozen. Pairs beyond
    the cutoff are dropped before every evaluation.
    """

    def __init__(self, model: nn.Module, chemical_symbols: Sequence[str] | None = None) -> None:
        super().__init__()
        from nequip.data import AtomicDataDict  # optional dependency
        from nequip.nn import AtomwiseReduce

        extra = sorted(set(model.irreps_in) - _GIVEN_INPUTS)
        if extra:
            raise ValueError(f"the nequip model needs inputs nvdd does not provide: {extra}")
        self.model = model.requires_grad_(False)
        energy_model = model.model.func  # GraphModel -> ForceStressOutput -> energy layers
        self.layer_names = [
            name
            for name, m in energy_model.named_children()
            if not (
                isinstance(m, AtomwiseReduce) and m.out_field == AtomicDataDict.TOTAL_ENERGY_KEY
            )
        ]
        symbols = list(chemical_symbols or model.type_names)
        if len(symbols) != len(model.type_names):
            raise ValueError(
                f"{len(symbols)} chemical symbols for {len(model.type_names)} model types "
                f"{model.type_names}"
            )
        unknown = [s for s in symbols if s not in number_of_symbol]
        if unknown:
            given = "the given chemical_symbols" if chemical_symbols else "its type_names"
            raise ValueError(
                f"{given} {symbols} hold {unknown}, not element symbols: pass "
                f"chemical_symbols, the element of each of the model's types "
                f"{list(model.type_names)} in that order"
            )
        type_map = {number_of_symbol[s]: k for k, s in enumerate(symbols)}
        lookup = species_lookup(type_map, next(model.parameters()).device)
        self.register_buffer("type_index", lookup, persistent=False)
        cutoff = float(model.metadata["r_max"])
        self.model_config = ModelConfig.by_autograd(NeighborConfig(cutoff=cutoff))

    def check_species(self, numbers: torch.Tensor) -> None:
        """Raise a ValueError naming the elements of `numbers` the model has no type for."""
        require_species(self.type_index, numbers, type(self).__name__.removesuffix("Wrapper"))

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom and per-system energies (eV), nequip's per-type shift and scale included."""
        from nequip.data import AtomicDataDict  # optional dependency

        inputs = self.adapt_input(batch)
        if host_checks_allowed():
            self.check_species(inputs.atomic_numbers)
        positions = inputs.positions
        center, neighbour = inputs.edge_index
        data = {
            AtomicDataDict.POSITIONS_KEY: positions,
            AtomicDataDict.EDGE_INDEX_KEY: inputs.edge_index,
            AtomicDataDict.EDGE_VECTORS_KEY: positions[neighbour]
            - positions[center]
            + inputs.shifts,
            AtomicDataDict.ATOM_TYPE_KEY: self.type_index[inputs.atomic_numbers],
            AtomicDataDict.BATCH_KEY: inputs.batch_idx,
        }
        energy_model = self.model.model.func
        for name in self.layer_names:
            data = energy_model.get_submodule(name)(data)
        energies = data[AtomicDataDict.PER_ATOM_ENERGY_KEY].reshape(-1).to(positions.dtype)
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`nequip_spec()` with the model's convolutions as `n_layers` and the storage policy
        of `strategy`."""
        from nequip.nn import ConvNetLayer  # optional dependency

        n_layers = sum(isinstance(m, ConvNetLayer) for m in self.model.modules())
        return for_strategy(nequip_spec(n_layers=n_layers), strategy)


class AllegroWrapper(NequIPWrapper):
    """Wrap an Allegro `GraphModel` (nequip-allegro): `NequIPWrapper` with `allegro_spec()`
    (one cutoff of ghosts, no exchange between its layers)."""

    def __init__(self, model: nn.Module, chemical_symbols: Sequence[str] | None = None) -> None:
        from allegro.nn import Allegro_Module  # optional dependency
        from nequip.nn import ConvNetLayer

        modules = list(model.modules())
        if not any(isinstance(m, Allegro_Module) for m in modules) or any(
            isinstance(m, ConvNetLayer) for m in modules
        ):
            raise ValueError(
                "AllegroWrapper takes an Allegro model (no message-passing convolutions): "
                "use NequIPWrapper for NequIP models"
            )
        super().__init__(model, chemical_symbols)

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`allegro_spec()` with the storage policy of `strategy`."""
        return for_strategy(allegro_spec(), strategy)


def marked_scatter(
    src: torch.Tensor,
    index: torch.Tensor,
    dim: int = -1,
    out: torch.Tensor | None = None,
    dim_size: int | None = None,
    reduce: str = "sum",
) -> torch.Tensor:
    """nequip's `scatter`, its result marked as a node aggregation."""
    from nequip.nn.utils import scatter  # optional dependency

    return scattered_onto_nodes(scatter(src, index, dim, out, dim_size, reduce))


def nequip_spec(n_layers: int | None = None) -> MLIPSpec:
    """`SPEC_MPNN_HALO` with the convolutions' message sum marked (eager forwards run without
    op interception) and messages written onto `edge_index[0]` only (edges into ghost rows
    are dropped); `n_layers`: the model's convolutions."""
    marked = PythonAdapter(target="nequip.nn._tp_scatter_base:scatter", replacement=marked_scatter)
    distribution = replace(
        SPEC_MPNN_HALO.distribution,
        third_party_helpers=(marked,),
        aggregations_marked=True,
        edge_target_row=0,  # nequip: edge_dst = edge_index[0]
    )
    return replace(SPEC_MPNN_HALO, distribution=distribution, n_layers=n_layers)


def allegro_spec() -> MLIPSpec:
    """Strictly local: no aggregation onto atoms is refreshed (`aggregations_marked` with
    nothing marked), every sum onto atoms writes onto `edge_index[0]`, and one cutoff of
    ghosts is enough whatever the number of Allegro layers (`n_layers` = 1). Both claims
    are checked once against an intercepted forward on every edge."""
    distribution = DistributionSpec(
        policy=HaloStoragePolicy(), aggregations_marked=True, edge_target_row=0
    )
    return MLIPSpec(distribution=distribution, output_kinds=ENERGY_KINDS, n_layers=1)
