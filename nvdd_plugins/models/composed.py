"""`SumModel`: models whose energies add up (an MLIP plus DFT-D3 dispersion, plus Ewald or
PME Coulomb), each on the pairs within its own cutoff, distributed as one model.

Its cutoff, and so its ghost shell, is the widest part's; its spec is the union of the
parts' (`spec_union`), so every part's aggregations are refreshed and every part's global
sums all-reduced in the one forward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.models.base import BaseModelMixin, ModelConfig, NeighborConfig
from nvdd_plugins.spec import MLIPSpec

__all__ = ["SumModel", "spec_union"]


def _unique(items: Sequence) -> tuple:
    out: list = []
    for item in items:
        if item not in out:
            out.append(item)
    return tuple(out)


def _common(values: Sequence):
    """The value all of `values` share, else None."""
    return values[0] if values and all(v == values[0] for v in values) else None


def spec_union(specs: Sequence[MLIPSpec], cutoffs: Sequence[float]) -> MLIPSpec:
    """One spec for models evaluated in one forward, with `cutoffs` (Å): every adapter and
    output kind of each (a conflict raises a ValueError), their shortcuts only where all
    claim them, and `n_layers` in units of the widest cutoff (the ghost shell a front end
    without exchange needs: the widest of the parts' n_layers x cutoff), None if a part's is
    unknown."""
    distributions = [spec.distribution for spec in specs]
    helpers = _unique([h for d in distributions for h in d.third_party_helpers])
    targets = [h.target for h in helpers]
    if len(set(targets)) < len(targets):
        raise ValueError(f"two parts replace the same helper differently: {sorted(targets)}")
    kinds: dict = {}
    for spec in specs:
        for name, kind in spec.output_kinds.items():
            if kinds.setdefault(name, kind) is not kind:
                raise ValueError(f"two parts declare output {name!r} as {kinds[name]} and {kind}")
    layers = [spec.n_layers for spec in specs]
    widest = max(cutoffs)
    n_layers = None
    if None not in layers:
        reach = max(n * c for n, c in zip(layers, cutoffs, strict=True))
        n_layers = max(1, math.ceil(reach / widest - 1e-12))
    distribution = replace(
        distributions[0],
        custom_ops=_unique([op for d in distributions for op in d.custom_ops]),
        third_party_helpers=helpers,
        aggregations_marked=all(d.aggregations_marked for d in distributions),
        edge_target_row=_common([d.edge_target_row for d in distributions]),
    )
    return MLIPSpec(
        distribution=distribution,
        output_kinds=kinds,
        gradient_outputs=frozenset().union(*(spec.gradient_outputs for spec in specs)),
        n_layers=n_layers,
    )


class SumModel(nn.Module, BaseModelMixin):
    """The sum of `parts`' energies, e.g. `SumModel(MACEWrapper(...), DFTD3Model(...))`.

    Each part gets the pairs within its own cutoff (the list is built at the widest) and
    returns per-atom "energies"; they are added, and forces and stress are derivatives of
    the sum. Other outputs (AIMNet2's "charges") are passed on; two parts returning the same
    one is an error. Every part must derive its forces by autograd.
    """

    def __init__(self, *parts: nn.Module) -> None:
        super().__init__()
        if not parts:
            raise ValueError("SumModel needs at least one model")
        for part in parts:
            config = getattr(part, "model_config", None)
            if config is None or config.neighbor_config is None:
                raise ValueError(f"{type(part).__name__} is not an nvdd model with a cutoff")
            if "forces" not in config.autograd_outputs:
                raise ValueError(
                    f"{type(part).__name__} computes its own forces; SumModel adds energies "
                    "and derives forces by autograd, so every part must"
                )
        self.parts = nn.ModuleList(parts)
        configs = [part.model_config for part in parts]
        self.model_config = ModelConfig(
            autograd_outputs=frozenset().union(*(c.autograd_outputs for c in configs)),
            autograd_inputs=frozenset({"positions"}),
            neighbor_config=NeighborConfig(cutoff=max(part.cutoff for part in parts)),
            edge_energy=all(c.edge_energy for c in configs),
        )

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom and per-system energies (eV) summed over the parts, and their other
        outputs."""
        out: dict[str, torch.Tensor] = {}
        for part in self.parts:
            result = part(self._within(batch, part.cutoff))
            for name, value in result.items():
                if name in ("energies", "energy") and name in out:
                    out[name] = out[name] + value.to(out[name].dtype)
                elif name in out:
                    raise ValueError(f"two parts of the SumModel return {name!r}")
                else:
                    out[name] = value
        return out

    def _within(self, batch: Batch, cutoff: float) -> Batch:
        """`batch` with the pairs closer than `cutoff` (Å) only (itself at the widest)."""
        if cutoff >= self.cutoff:
            return batch
        n, edge_index = batch.num_nodes, batch.edge_index
        shifts = batch.get("shifts")
        valid = (edge_index < n).all(dim=0)
        rows = torch.where(valid, edge_index, 0)  # padding slots hold sentinels >= n
        with torch.no_grad():
            vectors = batch.positions[rows[1]] - batch.positions[rows[0]]
            if shifts is not None:
                vectors = vectors + shifts
            near = valid & (torch.linalg.vector_norm(vectors, dim=-1) < cutoff)
        return batch.select_edges(near.nonzero().squeeze(1))

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`spec_union` of the parts' specs; None (not distributable) if a part has none."""
        specs = [part.distribution_spec(strategy) for part in self.parts]
        if any(spec is None for spec in specs):
            return None
        return spec_union(specs, [part.cutoff for part in self.parts])

    def supported_species(self) -> tuple[int, ...] | None:
        """The atomic numbers every part has parameters for; None: any."""
        known = [part.supported_species() for part in self.parts]
        known = [set(k) for k in known if k is not None]
        return tuple(sorted(set.intersection(*known))) if known else None
