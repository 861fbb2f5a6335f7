"""Random-weight mace `ScaleShiftMACE` models for tests, examples and benchmarks
(`MACEWrapper` wraps them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from nvdd_plugins.models.seeding import seeded_weights

__all__ = ["MACEArchitecture", "random_mace"]


@dataclass(frozen=True)
class MACEArchitecture:
    """The sizes of a `random_mace` model (mace's `ScaleShiftMACE` arguments of the same
    names; `mlp_irreps` is its `MLP_irreps`, `interaction_scale` its `atomic_inter_scale`)."""

    hidden_irreps: str = "8x0e+8x1o"
    max_ell: int = 2
    correlation: int = 2
    num_interactions: int = 2
    num_bessel: int = 6
    mlp_irreps: str = "8x0e"
    avg_num_neighbors: float = 12.0
    interaction_scale: float = 0.1


def random_mace(
    species: Sequence[int],
    r_max: float = 4.5,
    architecture: MACEArchitecture = MACEArchitecture(),
    atomic_energies: Sequence[float] | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> nn.Module:
    """A random-weight mace `ScaleShiftMACE` (residual interaction blocks, Bessel radial
    basis) for tests, examples and benchmarks; its weights depend only on `seed`."""
    size = architecture
    import mace  # noqa: F401  (optional dependency; must be imported before e3nn)
    from e3nn import o3
    from mace import modules

    block = modules.interaction_classes["RealAgnosticResidualInteractionBlock"]
    energies = np.zeros(len(species)) if atomic_energies is None else np.array(atomic_energies)
    with seeded_weights(seed):
        model = modules.ScaleShiftMACE(
            r_max=r_max,
            num_bessel=size.num_bessel,
            num_polynomial_cutoff=5,
            max_ell=size.max_ell,
            interaction_cls=block,
            interaction_cls_first=block,
            num_interactions=size.num_interactions,
            num_elements=len(species),
            hidden_irreps=o3.Irreps(size.hidden_irreps),
            MLP_irreps=o3.Irreps(size.mlp_irreps),
            gate=torch.nn.functional.silu,
            atomic_energies=energies,
            avg_num_neighbors=size.avg_num_neighbors,
            atomic_numbers=list(species),
            correlation=size.correlation,
            radial_type="bessel",
            atomic_inter_scale=size.interaction_scale,
            atomic_inter_shift=0.0,
        )
    return model.to(dtype)
