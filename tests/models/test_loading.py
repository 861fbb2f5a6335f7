"""Loading saved models: a plain `torch.load` of a whole-model file fails under torch's
weights-only default; the uncaught error then names the wrapper's loader."""

from __future__ import annotations

import pickle
import sys

import pytest
import torch

from nvdd_plugins.models import LOADERS, MACEWrapper
from nvdd_plugins.models.loading import loader_hint


def _weights_only_failure(path) -> pickle.UnpicklingError:
    with pytest.raises(pickle.UnpicklingError) as caught:
        torch.load(path)
    return caught.value


def test_a_plain_torch_load_of_a_mace_file_names_the_loader(tmp_path, capsys, monkeypatch) -> None:
    pytest.importorskip("mace")
    from nvdd_plugins.models import random_mace

    path = tmp_path / "model.pt"
    torch.save(random_mace([29]), path)
    # importing mace sets this, which makes torch.load unsafe by default in that process
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
    error = _weights_only_failure(path)
    assert loader_hint(error).endswith("load it with MACEWrapper.from_file(path)")
    sys.excepthook(type(error), error, error.__traceback__)  # what an uncaught one prints
    assert "MACEWrapper.from_file(path)" in capsys.readouterr().err
    assert isinstance(MACEWrapper.from_file(path), MACEWrapper)


def test_files_of_other_packages_get_no_hint(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
    path = tmp_path / "linear.pt"
    torch.save(torch.nn.Linear(2, 2), path)
    assert loader_hint(_weights_only_failure(path)) is None
    assert loader_hint(ValueError("GLOBAL mace.x was not an allowed global")) is None
    assert set(LOADERS) >= {"mace", "sevenn", "nequip", "fairchem", "aimnet"}


def test_mace_wrapper_given_a_path_names_from_file() -> None:
    with pytest.raises(TypeError, match=r"got a str; .*use MACEWrapper\.from_file\(path\)"):
        MACEWrapper("model.pt")


def test_the_readme_names_every_loader() -> None:
    from tests.helpers.multiprocess import REPO

    table = (REPO / "README.md").read_text().split("**Loading a saved model.**")[1].split("\n\n")[1]
    for loader in LOADERS.values():
        assert f"`{loader}`" in table, loader
