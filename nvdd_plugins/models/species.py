"""Species of a model's embedding by atomic number, and the atomic numbers it lacks."""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["missing_species", "species_lookup"]


def species_lookup(type_map: Mapping[int, int], device: torch.device) -> torch.Tensor:
    """Species index by atomic number from `type_map` (atomic number -> species); -1: none."""
    zs = sorted(type_map)
    lookup = torch.full((max(zs) + 1,), -1, dtype=torch.long, device=device)
    lookup[torch.tensor(zs, device=device)] = torch.tensor([type_map[z] for z in zs], device=device)
    return lookup


def missing_species(lookup: torch.Tensor, numbers: torch.Tensor) -> list[int]:
    """The atomic numbers of `numbers` that `lookup` (`species_lookup`) maps to no species,
    sorted (empty when it knows them all)."""
    size = lookup.shape[0]
    # one host synchronisation: the check runs before every forward
    unknown = (numbers >= size) | (lookup[numbers.clamp(max=size - 1)] < 0)
    if not bool(unknown.any()):
        return []
    return sorted(set(numbers.tolist()) - set(torch.nonzero(lookup >= 0).flatten().tolist()))
