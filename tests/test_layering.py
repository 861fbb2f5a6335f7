"""The package layering the README states, enforced by walking every import with `ast`.

Packages are layered bottom-up; a module may import its own package and the packages of
lower layers, never a higher layer or a sibling of its own layer, and never a private name
(`_x`) of another package. Another package is imported through its `__init__`, which is its
contract (`from nvdd_plugins.comm import X`, not `from nvdd_plugins.comm.mpi import X`).
The facades (`nvdd_plugins/__init__.py`, `nvdd_plugins/ops.py`) re-export and sit where their
imports put them.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests.helpers.multiprocess import REPO

# bottom-up; packages in one tuple are siblings (neither imports the other)
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "config"),
    ("native",),
    ("data",),
    ("geometry",),
    ("decomposition",),
    ("comm",),
    ("kernels", "spec"),
    ("ops",),
    ("models",),
    ("distributed_model",),
    ("dynamics",),
    ("parallel",),
    ("ase", "lammps_interface", "validate"),
)
LEVEL = {package: level for level, packages in enumerate(LAYERS) for package in packages}
ROOTS = ("nvdd_plugins", "lammps_interface")


def _package(module: str) -> str | None:
    """The layer name of an absolute module path inside this repo, or None."""
    parts = module.split(".")
    if parts[0] == "lammps_interface":
        return "lammps_interface"
    if parts[0] != "nvdd_plugins" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) of every import in `path`, lazy ones included."""
    module = ".".join(path.relative_to(REPO).with_suffix("").parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:  # relative import
                base = module.split(".")[: -node.level]
                target = ".".join([*base, target] if target else base)
            found.append((target, [alias.name for alias in node.names], node.lineno))
    return found


def _violations() -> list[str]:
    problems = []
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            source = _package(".".join(path.relative_to(REPO).with_suffix("").parts))
            if source is None or path == REPO / "nvdd_plugins" / "__init__.py":
                continue  # the top-level facade may re-export anything
            for target, names, line in _imports(path):
                other = _package(target)
                if other is None or other == source:
                    continue
                where = f"{path.relative_to(REPO)}:{line} imports {target}"
                if LEVEL[other] > LEVEL[source]:
                    problems.append(f"{where}: upward ({source} -> {other})")
                elif LEVEL[other] == LEVEL[source]:
                    problems.append(f"{where}: sibling layer ({source} -> {other})")
                if target.count(".") > (1 if target.startswith("nvdd_plugins") else 0):
                    problems.append(f"{where}: past the package surface of {other}")
                private = [n for n in names if n.startswith("_") and n != "__future__"]
                private_module = any(p.startswith("_") for p in target.split(".")[2:])
                if private or private_module:
                    problems.append(f"{where}: private name {private or target} of {other}")
    return problems


def test_every_package_is_listed() -> None:
    packages = {p.name for p in (REPO / "nvdd_plugins").iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in (REPO / "nvdd_plugins").glob("*.py")} - {"__init__"}
    assert packages | modules | {"lammps_interface"} == set(LEVEL)


def test_imports_follow_the_layers() -> None:
    problems = _violations()
    assert not problems, "\n".join(problems)


def test_dynamics_knows_nothing_of_ranks() -> None:
    """Integrators and hooks run in one process; distribution reaches them only as an
    injected evaluator, so nothing in `dynamics` imports a package that knows of ranks."""
    distributed = {"comm", "decomposition", "distributed_model"}
    found = [
        f"{path.relative_to(REPO)}:{line} imports {target}"
        for path in sorted((REPO / "nvdd_plugins" / "dynamics").rglob("*.py"))
        for target, _, line in _imports(path)
        if _package(target) in distributed
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        ("nvdd_plugins.spec.presets", "nvdd_plugins.models", "upward"),
        ("nvdd_plugins.spec.presets", "nvdd_plugins.kernels", "sibling layer"),
        ("nvdd_plugins.ase.calculator", "lammps_interface.halo", "sibling layer"),
        ("nvdd_plugins.parallel.manager", "nvdd_plugins.comm.mpi", "package surface"),
    ],
)
def test_the_checker_sees_a_violation(monkeypatch, source, target, expected) -> None:
    """Negative control: a planted bad import is reported."""
    planted = REPO / Path(*source.split(".")).with_suffix(".py")
    original = _imports

    def with_planted(path: Path):
        found = original(path)
        return [*found, (target, [], 1)] if path == planted else found

    monkeypatch.setattr(sys.modules[__name__], "_imports", with_planted)
    assert any(expected in problem for problem in _violations())


# inside distributed_model, bottom-up: rows (ownership, views) -> evaluation (one forward on
# a view) -> layouts (where rows come from and where results go)
SUBLAYERS = ("rows", "evaluation", "layouts")


def _sublayer_violations() -> list[str]:
    root = REPO / "nvdd_plugins" / "distributed_model"
    problems = []
    for level, sub in enumerate(SUBLAYERS):
        for path in sorted((root / sub).rglob("*.py")):
            for target, _, line in _imports(path):
                parts = target.split(".")
                if parts[:2] != ["nvdd_plugins", "distributed_model"]:
                    continue
                other = parts[2] if len(parts) > 2 else None
                if other not in SUBLAYERS or SUBLAYERS.index(other) > level:
                    problems.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    return problems


def test_distributed_model_is_rows_then_evaluation_then_layouts() -> None:
    """rows never import evaluation or layouts, evaluation never imports layouts, and no
    module inside reaches the package's own `__init__` (which imports them all)."""
    loose = sorted(
        p.name
        for p in (REPO / "nvdd_plugins" / "distributed_model").glob("*.py")
        if p.name != "__init__.py"
    )
    assert not loose, f"modules outside rows/, evaluation/, layouts/: {loose}"
    problems = _sublayer_violations()
    assert not problems, "\n".join(problems)


def test_the_sublayer_checker_sees_an_upward_import(monkeypatch) -> None:
    """Negative control: evaluation importing a layout is reported."""
    planted = REPO / "nvdd_plugins" / "distributed_model" / "evaluation" / "engine.py"
    original = _imports

    def with_planted(path: Path):
        found = original(path)
        target = "nvdd_plugins.distributed_model.layouts.model"
        return [*found, (target, [], 1)] if path == planted else found

    monkeypatch.setattr(sys.modules[__name__], "_imports", with_planted)
    assert any("layouts.model" in problem for problem in _sublayer_violations())
