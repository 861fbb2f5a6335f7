"""`UMAWrapper`: fairchem-core's UMA architecture (the eSCN-MD backbone and its energy head).

The wrapper hands fairchem's own backbone forward nvdd's prebuilt graph (fairchem's
`otf_graph=False` input): fairchem's edge `(source, target)` carries the vector
`pos[source] - pos[target] + shift` and its messages are summed onto the target, so nvdd's
edge (i, j) with vector `x[j] - x[i] + shifts` is given as `(j, i)`, and every aggregation
onto atoms writes onto nvdd's `edge_index[0]`. The Cartesian shifts are passed as fairchem's
`cell_offsets` against a unit cell, so fairchem's `cell_offsets @ cell` is nvdd's shift. The
head's energy block gives the per-atom energies; fairchem's sum and its autograd force/stress
head are skipped (nvdd sums the owned energies and derives forces and stress by autograd).

What is global (docs/uma.md): the charge, spin and dataset embeddings are per-system inputs,
identical on every rank. Channel balancing (`charge_balanced_channels`,
`spin_balanced_channels`) sums node features over the whole system after every block: the
spec replaces it by `balance_channels_over_ranks`, whose sums are all-reduced.
Mixture-of-linear-experts backbones (coefficients from the system's composition) are
refused; merge a MoLE model for a fixed composition first (fairchem's `merge_MOLE_model`),
which gives a dense backbone.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.models.base import (
    BaseModelMixin,
    ModelConfig,
    NeighborConfig,
    host_checks_allowed,
)
from nvdd_plugins.spec import (
    GLOBAL_SUM_ADAPTERS,
    SPEC_MPNN_HALO,
    MLIPSpec,
    PythonAdapter,
    for_strategy,
    summed_over_ranks,
)

__all__ = ["UMAWrapper", "balance_channels_over_ranks", "uma_spec"]


class _GraphInputs(dict):
    """fairchem's backbone reads its input with `get(key, default=...)` (its `AtomicData`)."""

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key, default)


class UMAWrapper(nn.Module, BaseModelMixin):
    """Wrap a fairchem UMA model: a `HydraModel` whose backbone is fairchem's dense
    `eSCNMDBackbone` and whose energy head sums per-atom energies (`MLP_EFS_Head`,
    `MLP_Energy_Head`, `Linear_Energy_Head` with `reduce="sum"`).

    Args:
        model: the fairchem model, e.g. from `random_uma` or fairchem's
            `load_inference_model` (eager, float32 or float64, the "general" execution mode).
        task_name: the dataset embedding to use ("omat", "omol", ...), required when the
            backbone has dataset embeddings.
        charge: the system's total charge (fairchem's per-system `charge` input).
        spin: the system's spin multiplicity (fairchem's per-system `spin` input).

    For inference, as fairchem's calculator: the model's parameters are frozen.
    """

    def __init__(
        self,
        model: nn.Module,
        task_name: str | None = None,
        charge: int = 0,
        spin: int = 0,
    ) -> None:
        super().__init__()
        self.model = model.requires_grad_(False)
        backbone = model.backbone
        _require_supported(backbone)
        # the backbone on nvdd's graph: a shallow copy (same parameters and buffers) whose
        # `otf_graph` is off, leaving the caller's model as it was; not a registered
        # submodule, so the parameters are listed once
        graph_backbone = copy.copy(backbone)
        graph_backbone.otf_graph = False
        # nvdd takes forces and stress by autograd itself: the backbone need not make the
        # positions and cell require grad (a call that would break a compiled graph)
        graph_backbone.regress_config = replace(backbone.regress_config, forces=False, stress=False)
        graph_backbone.csd_embedding = _SystemEmbedding(backbone)
        object.__setattr__(self, "_graph_backbone", graph_backbone)
        self.energy_block = _energy_block(model)
        if backbone.use_dataset_embedding:
            known = sorted(backbone.dataset_mapping)
            if task_name not in known:
                raise ValueError(f"UMA needs task_name, one of {known}; got {task_name!r}")
        self.task_name = task_name
        for name, value in (("charge", charge), ("spin", spin)):
            if int(value) != value:
                raise ValueError(
                    f"UMA takes a whole-number {name} (fairchem embeds it as an integer), "
                    f"got {value!r}"
                )
        self.charge, self.spin = int(charge), int(spin)
        # fairchem's polynomial envelope is zero beyond the cutoff and weighs every message
        # (pairs beyond it add exact zeros); eager forwards drop them all the same
        neighbors = NeighborConfig(
            float(backbone.cutoff), accepts_skin_pairs=True, prune_skin_pairs=True
        )
        self.model_config = ModelConfig.by_autograd(neighbors)

    @classmethod
    def from_checkpoint(cls, path: str | Path, **options: Any) -> UMAWrapper:
        """Wrap the model of a fairchem inference checkpoint (fairchem's
        `load_inference_model`: its config and weights); `options` as for `UMAWrapper`."""
        from fairchem.core.units.mlip_unit.utils import load_inference_model  # optional

        model = load_inference_model(str(path), return_checkpoint=False)
        return cls(model.eval(), **options)

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom and per-system energies (eV) from fairchem's backbone and energy block."""
        inputs = self.adapt_input(batch)
        numbers = inputs.atomic_numbers
        if host_checks_allowed():
            self._check_numbers(numbers)
        positions = inputs.positions
        center, neighbour = inputs.edge_index
        n_graphs = inputs.num_graphs
        unit_cell = torch.eye(3, dtype=positions.dtype, device=positions.device)
        per_graph = torch.ones(n_graphs, dtype=torch.long, device=positions.device)
        data = _GraphInputs(
            pos=positions,
            atomic_numbers=numbers,
            batch=inputs.batch_idx,
            # (a bincount's shape depends on values: it would break a compiled graph)
            natoms=per_graph.new_zeros(n_graphs).index_add_(
                0, inputs.batch_idx, torch.ones_like(inputs.batch_idx)
            ),
            edge_index=torch.stack([neighbour, center]),
            # every system's "cell" is the unit matrix: fairchem's shift = cell_offsets @ cell
            cell=unit_cell.expand(n_graphs, 3, 3),
            cell_offsets=inputs.shifts,
            nedges=_edges_per_graph(center.shape[0], n_graphs, positions.device),
            charge=per_graph * self.charge,
            spin=per_graph * self.spin,
        )
        if self.model.backbone.use_dataset_embedding:
            data["dataset"] = [self.task_name] * n_graphs
        embedding = self._graph_backbone(data)["node_embedding"]
        energies = self.energy_block(embedding[:, 0, :]).reshape(-1).to(positions.dtype)
        energy = energies.new_zeros(n_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def _check_numbers(self, numbers: torch.Tensor) -> None:
        """Raise a ValueError for atomic numbers beyond the backbone's element embedding."""
        limit = self.model.backbone.max_num_elements
        if numbers.numel() and int(numbers.max()) >= limit:
            raise ValueError(f"the UMA model embeds atomic numbers below {limit} only")

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`uma_spec()` with the backbone's message-passing depth and the storage policy of
        `strategy`."""
        backbone = self.model.backbone
        balanced = (
            backbone.charge_channel_end > backbone.charge_channel_start
            or backbone.spin_channel_end > backbone.spin_channel_start
        )
        spec = uma_spec(n_layers=backbone.num_layers + 1, balanced=balanced)
        return for_strategy(spec, strategy)


class _SystemEmbedding:
    """fairchem's charge, spin and dataset embedding of the systems (`csd_embedding`),
    computed once for each set of inputs: it depends on the wrapper's constants and the
    weights alone, and fairchem's spin embedding indexes by value (`torch.where(spin ==
    0)`), which torch.compile cannot capture in its graph. A compiled (or captured) forward
    reads the value the eager forward before it, the checked one, computed."""

    def __init__(self, backbone: nn.Module) -> None:
        self.backbone = backbone
        self._known: dict[tuple, torch.Tensor] = {}

    def __call__(self, charge: torch.Tensor, spin: torch.Tensor, dataset: Any) -> torch.Tensor:
        if not host_checks_allowed():
            return next(iter(self._known.values()))
        weights = tuple(t._version for t in self.backbone.parameters())
        key = (tuple(charge.tolist()), tuple(spin.tolist()), dataset and tuple(dataset))
        key += (charge.device, weights)
        if key not in self._known:
            embed = type(self.backbone).csd_embedding
            self._known = {key: embed(self.backbone, charge, spin, dataset)}
        return self._known[key]


def uma_spec(n_layers: int | None = None, balanced: bool = False) -> MLIPSpec:
    """`SPEC_MPNN_HALO` (every `index_add` onto atoms intercepted and its ghost rows
    refreshed) with every aggregation writing onto nvdd's `edge_index[0]` (fairchem's edge
    target); `n_layers`: the backbone's blocks plus its edge-degree embedding, each of which
    sums over neighbours. `balanced`: the backbone balances charge/spin channels, a sum over
    the whole system after every block, all-reduced (`balance_channels_over_ranks`); then no
    ghost shell serves without exchange (`n_layers` None)."""
    distribution = replace(SPEC_MPNN_HALO.distribution, edge_target_row=0)
    if balanced:
        target = "fairchem.core.models.uma.escn_md:balance_channels_batched"
        adapter = PythonAdapter(target=target, replacement=balance_channels_over_ranks)
        distribution = replace(
            distribution, custom_ops=GLOBAL_SUM_ADAPTERS, third_party_helpers=(adapter,)
        )
        n_layers = None
    return replace(SPEC_MPNN_HALO, distribution=distribution, n_layers=n_layers)


def balance_channels_over_ranks(
    emb: torch.Tensor,
    target: torch.Tensor,
    natoms: torch.Tensor,
    batch: torch.Tensor,
    start_idx: int,
    end_idx: int,
    target_offset: float = 0.0,
) -> torch.Tensor:
    """fairchem's `balance_channels_batched` (shift channels `start_idx:end_idx` of every
    atom's scalar features so that they sum to `target - target_offset` per system) with the
    per-system sums and atom counts taken over the owned rows and summed over ranks
    (`natoms`, the rank's rows, is not used)."""
    channels = emb[:, 0, start_idx:end_idx]
    n_systems = target.shape[0]
    sums = channels.new_zeros(n_systems, end_idx - start_idx).index_add_(0, batch, channels)
    ones = channels.new_ones(channels.shape[0])
    counts = channels.new_zeros(n_systems).index_add_(0, batch, ones)
    sums, counts = summed_over_ranks(sums), summed_over_ranks(counts)
    corrections = (sums - (target - target_offset).unsqueeze(1)) / counts.unsqueeze(1)
    out = emb.clone()
    out[:, 0, start_idx:end_idx] = channels - corrections[batch]
    return out


def _edges_per_graph(n_edges: int, n_graphs: int, device: torch.device) -> torch.Tensor:
    """Edge counts fairchem repeats each system's cell by (batched input): any split works
    since every cell is the unit matrix, so all edges are counted on the first system.
    Written on the device (no host-to-device copy, which a CUDA graph capture refuses)."""
    first = torch.arange(n_graphs, device=device) == 0
    return first.long() * n_edges


def _require_supported(backbone: nn.Module) -> None:
    """Refuse what the wrapper cannot distribute: MoLE experts weighted by the whole system,
    non-conservative direct forces, other backbones."""
    from fairchem.core.models.uma.escn_md import eSCNMDBackbone  # optional dependency
    from fairchem.core.models.uma.escn_moe import eSCNMDMoeBackbone

    if isinstance(backbone, eSCNMDMoeBackbone) and backbone.num_experts > 0:
        raise ValueError(
            "UMA mixture-of-linear-experts backbones weight their experts by the whole "
            "system's composition: merge the model for the system first (fairchem's "
            "merge_MOLE_model), which gives a dense backbone"
        )
    if not isinstance(backbone, eSCNMDBackbone):
        raise ValueError(f"UMAWrapper takes an eSCN-MD backbone, got {type(backbone).__name__}")
    if backbone.regress_config.direct_forces:
        raise ValueError("UMA with direct forces is not conservative: use autograd forces")


def _energy_block(model: nn.Module) -> nn.Module:
    """The energy block of the model's one energy head that sums per-atom energies."""
    heads = [head for head in model.output_heads.values() if hasattr(head, "energy_block")]
    if len(heads) != 1:
        raise ValueError(f"UMAWrapper needs exactly one energy head, found {len(heads)}")
    if getattr(heads[0], "reduce", "sum") != "sum":
        raise ValueError(f"the UMA energy head reduces by {heads[0].reduce!r}: need 'sum'")
    return heads[0].energy_block
