"""Species of a model's embedding by atomic number, and the elements it lacks."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from ase.data import chemical_symbols

__all__ = ["known_species", "missing_species", "require_species", "species_lookup"]


def species_lookup(type_map: Mapping[int, int], device: torch.device) -> torch.Tensor:
    """Species index by atomic number from `type_map` (atomic number -> species); -1: none."""
    zs = sorted(type_map)
    lookup = torch.full((max(zs) + 1,), -1, dtype=torch.long, device=device)
    lookup[torch.tensor(zs, device=device)] = torch.tensor([type_map[z] for z in zs], device=device)
    return lookup


def known_species(lookup: torch.Tensor) -> tuple[int, ...]:
    """The atomic numbers `lookup` (`species_lookup`) maps to a species, ascending."""
    return tuple(torch.nonzero(lookup >= 0).flatten().tolist())


def missing_species(lookup: torch.Tensor, numbers: torch.Tensor) -> list[int]:
    """The atomic numbers of `numbers` that `lookup` (`species_lookup`) maps to no species,
    sorted (empty when it knows them all)."""
    size = lookup.shape[0]
    # one host synchronisation: the check runs before every forward
    unknown = (numbers >= size) | (lookup[numbers.clamp(max=size - 1)] < 0)
    if not bool(unknown.any()):
        return []
    return sorted(set(numbers.tolist()) - set(known_species(lookup)))


def require_species(lookup: torch.Tensor, numbers: torch.Tensor, model: str) -> None:
    """Raise a ValueError naming the elements of `numbers` that `lookup` maps to no species
    of the `model` (its name, for the message)."""
    missing = missing_species(lookup, numbers)
    if missing:
        known = list(known_species(lookup))
        raise ValueError(
            f"the {model} model has no parameters for {_symbols(missing)} (it knows "
            f"{_symbols(known)}): use a model trained on these elements"
        )


def _symbols(numbers: list[int]) -> str:
    """Element symbols with their atomic numbers, e.g. "Au (79)"."""
    return ", ".join(f"{chemical_symbols[z]} ({z})" for z in numbers)
