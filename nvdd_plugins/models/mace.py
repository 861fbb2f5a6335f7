"""`MACEWrapper`: mace-torch models (MACE, ScaleShiftMACE) as nvdd model wrappers.

The wrapper hands mace its prebuilt graph (positions, edges, shifts, one-hot species) and
returns per-atom energies; the framework derives forces and stress by autograd. Every mace
aggregation is a `scatter_add_` onto receivers, so `SPEC_MPNN_HALO` distributes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike

import numpy as np
import torch
from ase.data import chemical_symbols
from torch import nn

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.models.base import BaseModelMixin, ModelConfig, NeighborConfig
from nvdd_plugins.spec import SPEC_MPNN_HALO, MLIPSpec

__all__ = ["MACEWrapper", "random_mace"]


class MACEWrapper(nn.Module, BaseModelMixin):
    """Wrap a mace-torch model.

    Args:
        model: a mace `MACE` / `ScaleShiftMACE` module (float32 or float64).
        head: head name for multi-head models (default: the first head).

    Like mace's own calculator, the wrapper is for inference: it freezes the model's
    parameters (requires_grad False), so force evaluations keep no activations for weight
    gradients (about a quarter less memory per atom).

    Pairs beyond `r_max` get exactly zero weight in mace (its polynomial cutoff is
    multiplied by r < r_max and its radial MLP has no biases), so Verlet pairs are accepted.
    """

    def __init__(self, model: nn.Module, head: str | None = None) -> None:
        super().__init__()
        self.model = model.requires_grad_(False)
        zs = [int(z) for z in model.atomic_numbers]
        device = next(model.parameters()).device
        lookup = torch.full((max(zs) + 1,), -1, dtype=torch.long, device=device)
        lookup[torch.tensor(zs, device=device)] = torch.arange(len(zs), device=device)
        self.register_buffer("species_index", lookup, persistent=False)
        self.n_species = len(zs)
        heads = list(getattr(model, "heads", ["default"]))
        self.head = head
        self.head_index = heads.index(head) if head is not None else 0
        self.model_config = ModelConfig(
            outputs=frozenset({"energy", "energies", "forces", "stress"}),
            autograd_outputs=frozenset({"forces", "stress"}),
            autograd_inputs=frozenset({"positions"}),
            neighbor_config=NeighborConfig(cutoff=float(model.r_max), accepts_skin_pairs=True),
        )

    @classmethod
    def from_file(
        cls,
        path: str | PathLike[str],
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
        head: str | None = None,
    ) -> MACEWrapper:
        """Load a mace model saved with `torch.save(model)` (a trusted file)."""
        import mace  # noqa: F401  (optional dependency; sets mace's torch.load defaults)

        model = torch.load(path, map_location=device, weights_only=False)
        return cls(model.to(dtype), head=head)

    def check_species(self, numbers: torch.Tensor) -> None:
        """Raise a ValueError naming the elements of `numbers` the model has no parameters for."""
        known = numbers < self.species_index.shape[0]
        if not bool(known.all()) or bool((self.species_index[numbers[known]] < 0).any()):
            present = sorted(set(numbers.tolist()))
            model_numbers = torch.nonzero(self.species_index >= 0).flatten().tolist()
            missing = [z for z in present if z not in model_numbers]
            raise ValueError(
                f"the MACE model has no parameters for {_symbols(missing)} (it knows "
                f"{_symbols(model_numbers)}): use a model trained on these elements"
            )

    def prepare_for_compile(self) -> MACEWrapper:
        """A copy whose mace model is rebuilt the way mace prepares models for torch.compile
        (e3nn code generation off, fx-simplified blocks); same weights and dtype."""
        from mace.tools.compile import prepare  # optional dependency
        from mace.tools.scripts_utils import extract_model

        parameter = next(self.model.parameters())
        model = prepare(extract_model)(model=self.model, map_location=parameter.device)
        return MACEWrapper(model.to(parameter.dtype), head=self.head)

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom and per-system energies (eV), E0 included."""
        inputs = self.adapt_input(batch)
        numbers = inputs.atomic_numbers
        if not torch.compiler.is_compiling():
            self.check_species(numbers)
        species = self.species_index[numbers]
        dtype = inputs.positions.dtype
        node_attrs = nn.functional.one_hot(species, self.n_species).to(dtype)
        data = {
            "positions": inputs.positions,
            "edge_index": inputs.edge_index,
            "shifts": inputs.shifts,
            "unit_shifts": torch.zeros_like(inputs.shifts),
            "cell": inputs.cell.reshape(-1, 3),
            "node_attrs": node_attrs,
            "batch": inputs.batch_idx,
            "ptr": inputs.ptr,
            "head": torch.full((inputs.num_graphs,), self.head_index, device=numbers.device),
        }
        out = self.model(data, training=False, compute_force=False)
        energies = out["node_energy"].to(dtype)
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`SPEC_MPNN_HALO` for the halo strategy."""
        return SPEC_MPNN_HALO if strategy in (None, StrategyKind.HALO) else None


def random_mace(
    species: Sequence[int],
    hidden_irreps: str = "8x0e+8x1o",
    max_ell: int = 2,
    correlation: int = 2,
    r_max: float = 4.5,
    num_interactions: int = 2,
    num_bessel: int = 6,
    mlp_irreps: str = "8x0e",
    atomic_energies: Sequence[float] | None = None,
    avg_num_neighbors: float = 12.0,
    interaction_scale: float = 0.1,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> nn.Module:
    """A random-weight mace `ScaleShiftMACE` (residual interaction blocks, Bessel radial
    basis) for tests, examples and benchmarks; nothing is downloaded. Weights depend only on
    `seed` (the global RNG state is kept)."""
    import mace  # noqa: F401  (optional dependency; must be imported before e3nn)
    from e3nn import o3
    from mace import modules

    block = modules.interaction_classes["RealAgnosticResidualInteractionBlock"]
    energies = np.zeros(len(species)) if atomic_energies is None else np.array(atomic_energies)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = modules.ScaleShiftMACE(
            r_max=r_max,
            num_bessel=num_bessel,
            num_polynomial_cutoff=5,
            max_ell=max_ell,
            interaction_cls=block,
            interaction_cls_first=block,
            num_interactions=num_interactions,
            num_elements=len(species),
            hidden_irreps=o3.Irreps(hidden_irreps),
            MLP_irreps=o3.Irreps(mlp_irreps),
            gate=torch.nn.functional.silu,
            atomic_energies=energies,
            avg_num_neighbors=avg_num_neighbors,
            atomic_numbers=list(species),
            correlation=correlation,
            radial_type="bessel",
            atomic_inter_scale=interaction_scale,
            atomic_inter_shift=0.0,
        )
    finally:
        torch.random.set_rng_state(state)
    return model.to(dtype)


def _symbols(numbers: list[int]) -> str:
    """Element symbols with their atomic numbers, e.g. "Au (79)"."""
    return ", ".join(f"{chemical_symbols[z]} ({z})" for z in numbers)
