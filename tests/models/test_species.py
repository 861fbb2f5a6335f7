"""The species lookup MACE and SevenNet share: atomic number -> species index, and the
atomic numbers a model has no species for."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins.models.species import (
    known_species,
    missing_species,
    require_species,
    species_lookup,
)


def test_lookup_maps_each_number_to_its_species_and_others_to_minus_one() -> None:
    lookup = species_lookup({29: 0, 1: 2, 8: 1}, torch.device("cpu"))
    assert lookup.dtype == torch.long and lookup.shape == (30,)
    assert lookup[[1, 8, 29]].tolist() == [2, 1, 0]
    assert int((lookup >= 0).sum()) == 3  # every other number maps to -1


def test_known_species_are_the_mapped_numbers_ascending() -> None:
    assert known_species(species_lookup({29: 0, 1: 2, 8: 1}, torch.device("cpu"))) == (1, 8, 29)


def test_missing_species_names_gaps_and_numbers_beyond_the_table() -> None:
    lookup = species_lookup({1: 0, 8: 1}, torch.device("cpu"))
    assert missing_species(lookup, torch.tensor([8, 1, 1, 8])) == []
    # negative control: an unknown number inside the table (6) and one beyond it (79)
    assert missing_species(lookup, torch.tensor([79, 1, 6, 79, 8])) == [6, 79]
    assert missing_species(lookup, torch.tensor([6])) == [6]
    assert missing_species(lookup, torch.tensor([], dtype=torch.long)) == []  # a rank owning none


def test_require_species_names_the_elements() -> None:
    lookup = species_lookup({1: 0, 8: 1}, torch.device("cpu"))
    require_species(lookup, torch.tensor([1, 8]), "MACE")
    with pytest.raises(
        ValueError,
        match=r"MACE model has no parameters for C \(6\), Au \(79\) "
        r"\(it knows H \(1\), O \(8\)\)",
    ):
        require_species(lookup, torch.tensor([79, 6, 1]), "MACE")
