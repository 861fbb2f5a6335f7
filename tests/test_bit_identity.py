"""scripts/bit_identity.py compare: bit-for-bit equal dumps pass; a one-ulp change, a lost
output, a lost case or a new failure fail; outputs and cases new in the second dump do not."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(scope="module")
def compare():
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location("bit_identity", SCRIPTS / "bit_identity.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module.compare


def _dump(directory: Path, cases: dict[str, dict]) -> Path:
    directory.mkdir()
    for name, outputs in cases.items():
        torch.save(outputs, directory / f"{name}.pt")
    return directory


def _case() -> dict:
    forces = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return {"energy": torch.tensor([1.5], dtype=torch.float64), "forces": forces}


def _one_ulp_up(value: torch.Tensor) -> torch.Tensor:
    return torch.nextafter(value, torch.full_like(value, float("inf")))


def test_identical_dumps_pass(tmp_path: Path, compare) -> None:
    a = _dump(tmp_path / "a", {"m-bulk-halo-np2": _case(), "m-bulk-x-np1": {"_error": "no"}})
    b = _dump(tmp_path / "b", {"m-bulk-halo-np2": _case(), "m-bulk-x-np1": {"_error": "no"}})
    assert compare(a, b) == 0


@pytest.mark.parametrize("change", ["one ulp", "lost output", "lost case", "new failure"])
def test_a_difference_fails(tmp_path: Path, compare, change: str) -> None:
    changed = _case()
    if change == "one ulp":
        changed["forces"][2, 1] = _one_ulp_up(changed["forces"][2, 1])
    elif change == "lost output":
        del changed["forces"]
    elif change == "new failure":
        changed = {"_error": "ValueError: broken"}
    a = _dump(tmp_path / "a", {"m-bulk-halo-np2": _case(), "m-cluster-halo-np1": _case()})
    after = {"m-cluster-halo-np1": _case()}
    if change != "lost case":
        after["m-bulk-halo-np2"] = changed
    assert compare(a, _dump(tmp_path / "b", after)) == 1


def test_new_outputs_and_cases_pass_and_only_selects(tmp_path: Path, compare) -> None:
    grown = _case() | {"stresses": torch.zeros(5, 3, 3, dtype=torch.float64)}
    a = _dump(tmp_path / "a", {"m-bulk-halo-np2": _case(), "m-bulk-x-np1": {"_error": "no"}})
    b = _dump(tmp_path / "b", {"m-bulk-halo-np2": grown, "m-bulk-x-np1": _case(), "new": _case()})
    assert compare(a, b) == 0
    assert compare(a, _dump(tmp_path / "c", {"m-bulk-x-np1": {"_error": "no"}})) == 1
    assert compare(a, tmp_path / "c", only="*-x-*") == 0
