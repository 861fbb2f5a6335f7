"""Random-weight NequIP and Allegro models from nequip's own builders, for tests, examples
and benchmarks (`NequIPWrapper` / `AllegroWrapper` wrap them)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from nvdd_plugins.models.seeding import seeded_weights

__all__ = ["random_allegro", "random_nequip"]


def random_nequip(
    species: Sequence[int],
    cutoff: float = 4.5,
    num_layers: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    **options: Any,
) -> nn.Module:
    """A random-weight NequIP `GraphModel` (nequip's `NequIPGNNModel`, shrunk: l_max 1, 4
    features, radial MLP width 8, 12 neighbours on average) for tests and examples; nothing
    is downloaded. `options` go to `NequIPGNNModel` (e.g. `per_type_energy_shifts`, by
    element symbol). Weights depend only on `seed`."""
    defaults = {"l_max": 1, "num_features": 4, "radial_mlp_width": 8, "avg_num_neighbors": 12.0}
    with _nequip_builder(seed):
        from nequip.model import NequIPGNNModel  # optional dependency

        model = NequIPGNNModel(
            **_builder_arguments(species, cutoff, seed, dtype),
            num_layers=num_layers,
            **{**defaults, **_unit_scale_shift(species), **options},
        )
    return model.eval()


def random_allegro(
    species: Sequence[int],
    cutoff: float = 4.5,
    num_layers: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    **options: Any,
) -> nn.Module:
    """A random-weight Allegro `GraphModel` (allegro's `AllegroModel`, shrunk: l_max 1, 8
    scalar and 4 tensor features, MLPs of width 8, Bessel two-body embedding) for tests and
    examples; `options` go to `AllegroModel`. Weights depend only on `seed`."""
    defaults = {
        "l_max": 1,
        "num_scalar_features": 8,
        "num_tensor_features": 4,
        "allegro_mlp_hidden_layers_width": 8,
        "scalar_embed_mlp_hidden_layers_width": 8,
        "readout_mlp_hidden_layers_width": 8,
        "avg_num_neighbors": 12.0,
        "radial_chemical_embed": {
            "_target_": "allegro.nn.TwoBodyBesselScalarEmbed",
            "num_bessels": 6,
        },
    }
    with _nequip_builder(seed):
        from allegro.model import AllegroModel  # optional dependency

        model = AllegroModel(
            **_builder_arguments(species, cutoff, seed, dtype),
            num_layers=num_layers,
            **{**defaults, **_unit_scale_shift(species), **options},
        )
    return model.eval()


def _builder_arguments(
    species: Sequence[int], cutoff: float, seed: int, dtype: torch.dtype
) -> dict[str, Any]:
    """The arguments every nequip model builder requires (types named by element)."""
    from ase.data import chemical_symbols

    return {
        "seed": seed,
        "model_dtype": {torch.float32: "float32", torch.float64: "float64"}[dtype],
        "r_max": float(cutoff),
        "type_names": [chemical_symbols[z] for z in species],
    }


def _unit_scale_shift(species: Sequence[int]) -> dict[str, dict[str, float]]:
    """Per-type energy scale 1 and shift 0 (nequip warns when none are given)."""
    from ase.data import chemical_symbols

    symbols = [chemical_symbols[z] for z in species]
    return {
        "per_type_energy_scales": dict.fromkeys(symbols, 1.0),
        "per_type_energy_shifts": dict.fromkeys(symbols, 0.0),
    }


@contextmanager
def _nequip_builder(seed: int) -> Iterator[None]:
    """Where nequip's model builders may run: its global state initialised once (nequip's
    builders require it), without keeping what that changes for everyone else (torch's
    default dtype, the seeds of torch, numpy and random)."""
    from nequip.utils.global_state import global_state_initialized, set_global_state

    with seeded_weights(seed):
        if not global_state_initialized():
            dtype, numpy_state, python_state = (
                torch.get_default_dtype(),
                np.random.get_state(),
                random.getstate(),
            )
            set_global_state()
            torch.set_default_dtype(dtype)
            np.random.set_state(numpy_state)
            random.setstate(python_state)
        yield
