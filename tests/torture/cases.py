"""Torture cases: everything about a case (system, ranks, model, path) follows from one seed.

`draw_case(seed)` draws the parameters with `numpy.random.default_rng(seed)`; `Case.atoms()`
rebuilds the same `ase.Atoms` from that integer every time it is called.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from ase import Atoms
from ase.md.velocitydistribution import thermalize_momenta

from tests.torture.zoo import MACE_SPECIES, MODEL_KINDS, OP_GROUPS, SPECIES, ModelSpec

PATHS = ("replicated", "trajectory", "ase", "gloo", "graph", "chunked")
"""How a case is run (see tests/torture/paths.py)."""
PATH_WEIGHTS = {
    "replicated": 0.55,
    "trajectory": 0.17,
    "ase": 0.2,
    "gloo": 0.08,
    "graph": 0.1,
    "chunked": 0.07,
}
"""Relative weights (normalised over the paths a draw allows)."""
FAMILIES = {
    "bulk": "periodic-style filling: jittered lattice or random with a 2 Å minimum distance",
    "slab": "a layer along one axis, vacuum around it",
    "wire": "a rod along one axis, vacuum around it on the other two",
    "cluster": "a ball of atoms (with a cell of any pbc, or with no cell at all)",
    "void": "bulk with a spherical hole",
    "two_phase": "dense on one side of a plane, dilute on the other",
    "subdomain_faces": "bulk with atoms exactly on fractional k/g planes (sub-domain faces)",
    "cell_faces": "bulk with atoms exactly on cell faces (fractional 0 or 1), edges, corners",
    "outside": "atoms wrapped outside the cell: just across periodic faces, whole periods "
    "away, or beyond open faces",
    "single": "one atom",
    "corner": "every atom in one corner (most ranks own nothing)",
    "pair": "two to four atoms interacting across a periodic face",
    "sparse": "a few far-apart atoms, many without any neighbour",
}
_FAMILY_WEIGHTS = (0.18, 0.1, 0.06, 0.1, 0.06, 0.06, 0.1, 0.08, 0.08, 0.05, 0.06, 0.04, 0.03)
CELL_KINDS = ("cubic", "orthorhombic", "triclinic", "tiny", "long_thin", "none")
_CELL_WEIGHTS = (0.15, 0.2, 0.3, 0.15, 0.1, 0.1)
_NO_CELL_FAMILIES = ("cluster", "single", "corner", "sparse", "two_phase")
OP_GROUP_WEIGHTS = (0.35, 0.15, 0.2, 0.15, 0.15)  # sums, unique, scatter/index_reduce, custom
MIN_DISTANCE = 2.0


@dataclass(frozen=True)
class Case:
    """One torture case (see `draw_case`)."""

    seed: int
    path: str
    family: str
    cell_kind: str
    pbc: tuple[bool, bool, bool]
    world_size: int
    grid: tuple[int, int, int] | None
    skin: float
    model: ModelSpec
    n_atoms: int = 0
    integrator: str = ""
    steps: int = 0
    temperature: float = 0.0
    dt: float = 0.0
    hysteresis: float = 0.0
    balance_weight: str = "atoms"  # DomainConfig.balance_weight (never drawn: set by tests)

    def atoms(self) -> Atoms:
        """The system (with Maxwell-Boltzmann velocities for dynamics paths)."""
        return build_atoms(self)

    def line(self) -> str:
        """The case on one line."""
        pbc = "".join("T" if p else "F" for p in self.pbc)
        grid = "x".join(map(str, self.grid)) if self.grid else "auto"
        text = (
            f"seed={self.seed} path={self.path} family={self.family} cell={self.cell_kind} "
            f"pbc={pbc} n={self.n_atoms} P={self.world_size} grid={grid} skin={self.skin} "
            f"model={self.model.label()}"
        )
        if self.steps:
            text += f" md={self.integrator}/{self.steps}x{self.dt}fs/{self.temperature:.0f}K"
            text += f" hysteresis={self.hysteresis:.2f}" if self.hysteresis else ""
        if self.balance_weight != "atoms":
            text += f" balance_weight={self.balance_weight}"
        return text

    def command(self) -> str:
        """The one-line reproduction command."""
        return (
            f"python benchmarks/torture.py --seed {self.seed} --cases 1 --paths {self.path} "
            "--verbose"
        )


def _choice(rng: np.random.Generator, options: tuple, weights: tuple | None = None) -> object:
    p = None if weights is None else np.asarray(weights) / np.sum(weights)
    return options[int(rng.choice(len(options), p=p))]


def _draw_model(rng: np.random.Generator, tiny: bool, path: str) -> ModelSpec:
    kind = _choice(rng, MODEL_KINDS, (0.64, 0.1, 0.1, 0.1, 0.06))
    if kind == "mace" and path in ("trajectory", "gloo"):
        kind = "mpnn"  # MACE is slow: static paths only
    if kind == "simple" and tiny:
        kind = "mpnn"
    if kind == "simple" and path == "graph":
        kind = "radius_graph"
    cutoff = 4.5 if kind == "mace" else float(_choice(rng, (3.5, 4.0, 4.5, 5.0)))
    n_layers = int(rng.integers(1, 5))
    ops = tuple(
        str(_choice(rng, _choice(rng, OP_GROUPS, OP_GROUP_WEIGHTS))) for _ in range(n_layers)
    )
    targets = tuple(str(_choice(rng, ("receivers", "senders"))) for _ in range(n_layers))
    mic = kind == "mpnn" and not tiny and rng.random() < 0.3
    if kind != "mpnn":
        layered = kind in ("simple", "radius_graph")
        ops, targets = (("index_add_",) * n_layers, targets) if layered else ((), ())
    return ModelSpec(str(kind), cutoff, ops, targets, mic, seed=int(rng.integers(1000)))


def draw_case(seed: int, paths: tuple[str, ...] = PATHS) -> Case:
    """The case of `seed`; `paths` restricts the path (the rest does not depend on it)."""
    path_rng, rng = np.random.default_rng([seed, 0]), np.random.default_rng(seed)
    allowed = tuple(p for p in PATHS if p in paths)
    path = str(_choice(path_rng, allowed, tuple(PATH_WEIGHTS[p] for p in allowed)))
    family = str(_choice(rng, tuple(FAMILIES), _FAMILY_WEIGHTS))
    cell_kind = str(_choice(rng, CELL_KINDS, _CELL_WEIGHTS))
    if cell_kind == "none" and family not in _NO_CELL_FAMILIES:
        cell_kind = "orthorhombic"
    pbc = tuple(bool(b) for b in rng.random(3) < 0.6)
    if cell_kind == "none":
        pbc = (False, False, False)
    elif cell_kind == "tiny" and not any(pbc):
        pbc = (True, False, True)
    model = _draw_model(rng, cell_kind == "tiny", path)
    world_size = int(_choice(rng, tuple(range(1, 9)), (4, 14, 14, 14, 12, 13, 12, 16)))
    if path == "gloo":
        world_size = 2 + world_size % 3  # real processes: 2 to 4
    grid = None
    if rng.random() < 0.35:
        p = world_size
        options = [
            (a, b, p // (a * b))
            for a in range(1, p + 1)
            for b in range(1, p + 1)
            if p % (a * b) == 0
        ]
        grid = options[int(rng.integers(len(options)))]
    skin = float(_choice(rng, (0.0, 0.3, 0.5)))
    case = Case(seed, path, family, cell_kind, pbc, world_size, grid, skin, model)
    if path in ("trajectory", "gloo", "graph"):
        steps = int(_choice(rng, (50, 80, 120, 200), (4, 3, 2, 1))) if path == "trajectory" else 30
        steps = min(steps, max(50, 400 // world_size))  # at most ~400 rank-steps
        integrator = str(_choice(rng, ("nve", "langevin")))
        temperature, dt = float(rng.uniform(600, 3000)), float(_choice(rng, (1.0, 2.0, 4.0)))
        hysteresis = float(rng.uniform(0.05, 0.9) * skin) if skin and rng.random() < 0.3 else 0.0
        case = replace(case, hysteresis=hysteresis, integrator=integrator, steps=steps)
        case = replace(case, temperature=temperature, dt=dt)
    return replace(case, n_atoms=len(case.atoms()))


# -- geometry ---------------------------------------------------------------------------------
def _cell(rng: np.random.Generator, case: Case) -> np.ndarray:
    """Rows are lattice vectors; periodic-style widths exceed 2 x cutoff except for "tiny"."""
    wide = 2.0 * case.model.cutoff + 0.3
    kind = case.cell_kind
    if kind == "cubic":
        return np.eye(3) * rng.uniform(wide, max(wide + 1.0, 16.0))
    if kind in ("orthorhombic", "none"):
        return np.diag(rng.uniform(wide, max(wide + 1.0, 18.0), 3))
    if kind == "long_thin":
        sides = rng.uniform(wide, wide + 2.0, 3)
        sides[rng.integers(3)] = rng.uniform(28.0, 45.0)
        return np.diag(sides)
    if kind == "tiny":
        sides = rng.uniform(2.6, 12.0, 3)
        axis = int(rng.choice(np.flatnonzero(case.pbc)))
        sides[axis] = rng.uniform(2.6, 2.0 * case.model.cutoff - 0.2)
        cell = np.diag(sides)
        cell[1, 0] = sides[1] * np.tan(np.radians(rng.uniform(-30, 30)))
        return cell
    cell = np.diag(rng.uniform(wide, 14.0, 3))  # triclinic, tilts up to 60 degrees
    tilts = np.tan(np.radians(rng.uniform(-60.0, 60.0, 3)))
    cell[1, 0], cell[2, 0], cell[2, 1] = cell[1, 1] * tilts[0], *(cell[2, 2] * tilts[1:])
    if rng.random() < 0.5:  # a general orientation
        q, r = np.linalg.qr(rng.normal(size=(3, 3)))
        q = q * np.sign(np.diag(r))
        cell = cell @ (q if np.linalg.det(q) > 0 else -q)
    faces = np.cross(np.roll(cell, -1, 0), np.roll(cell, -2, 0))
    widths = abs(np.linalg.det(cell)) / np.linalg.norm(faces, axis=1)
    return cell * max(1.0, wide / widths.min())


def _too_close(
    u: np.ndarray, others: np.ndarray, cell: np.ndarray, pbc: np.ndarray, images: np.ndarray
) -> bool:
    if not len(others):
        return False
    diff = others - u
    diff[:, pbc] -= np.round(diff[:, pbc])
    vectors = (diff[None] + images[:, None]) @ cell
    return bool((np.linalg.norm(vectors, axis=-1) < MIN_DISTANCE).any())


def _region(
    rng: np.random.Generator, case: Case, cell: np.ndarray, pbc: np.ndarray
) -> tuple[Callable[[np.ndarray], bool], float]:
    """(predicate on fractional coordinates, the volume fraction it covers)."""
    axis, other = rng.choice(3, 2, replace=False)
    family = case.family
    if family in ("slab", "wire", "corner"):
        axes = [axis] if family == "slab" else [axis, other] if family == "wire" else [0, 1, 2]
        width = rng.uniform(0.25, 0.6) if family != "corner" else rng.uniform(0.2, 0.4)
        centre = rng.uniform(0, 1, 3)
        centre[~pbc] = np.clip(centre[~pbc], width / 2, 1 - width / 2)
        if family == "corner":
            centre = np.where(pbc & (rng.random(3) < 0.5), 0.0, width / 2)

        def inside(u: np.ndarray) -> bool:
            d = u[axes] - centre[axes]
            d = np.where(pbc[axes], d - np.round(d), d)
            return bool(np.all(np.abs(d) < width / 2))

        return inside, width ** len(axes)
    if family in ("cluster", "void"):
        radius = rng.uniform(3.0, 7.0) if family == "cluster" else rng.uniform(2.5, 4.5)
        centre = rng.uniform(0.2, 0.8, 3)

        def in_ball(u: np.ndarray) -> bool:
            d = u - centre
            d[pbc] -= np.round(d[pbc])
            return bool(np.linalg.norm(d @ cell) < radius) == (family == "cluster")

        ball = 4.19 * radius**3 / abs(np.linalg.det(cell))
        return in_ball, min(ball, 1.0) if family == "cluster" else max(1.0 - ball, 0.2)
    if family == "two_phase":
        split = rng.uniform(0.3, 0.7)
        return lambda u: u[axis] < split or rng.random() < 0.15, split + 0.15 * (1 - split)
    return (lambda u: True), 1.0


def _snap(rng: np.random.Generator, case: Case, u: np.ndarray) -> np.ndarray:
    """Put a coordinate exactly on a sub-domain face (k/g) or on a cell face (0 or 1)."""
    u = u.copy()
    for axis in rng.choice(3, int(rng.integers(1, 4)), replace=False):
        if case.family == "cell_faces":
            u[axis] = float(rng.integers(2))
        else:
            g = case.grid[axis] if case.grid and rng.random() < 0.6 else int(rng.integers(1, 9))
            u[axis] = int(rng.integers(g + 1)) / g
        if rng.random() < 0.5:
            break
    return u


def build_atoms(case: Case) -> Atoms:
    """The `ase.Atoms` of `case`, rebuilt from its seed."""
    rng = np.random.default_rng([case.seed, 1])
    cell = _cell(rng, case)
    pbc = np.array(case.pbc)
    volume = abs(np.linalg.det(cell))
    inside, fraction = _region(rng, case, cell, pbc)
    per_atom = rng.uniform(18.0, 35.0)
    limit = 64 if case.path in ("trajectory", "gloo", "graph") else 150
    n_target = int(np.clip(round(fraction * volume / per_atom), 8, limit))
    special = {"single": 1, "pair": int(rng.integers(2, 5)), "sparse": int(rng.integers(2, 9))}
    n_target = special.get(case.family, n_target)
    lattice = case.family in ("bulk", "outside", "subdomain_faces") and rng.random() < 0.4
    if lattice:
        spacing = (volume / n_target) ** (1 / 3)
        counts = np.maximum(1, np.round(np.linalg.norm(cell, axis=1) / spacing))
        grid = np.stack(np.meshgrid(*[np.arange(c) for c in counts], indexing="ij"), -1)
        candidates = rng.permutation((grid.reshape(-1, 3) + rng.uniform(0.2, 0.8, 3)) / counts)
        candidates += rng.normal(scale=0.12, size=candidates.shape) @ np.linalg.inv(cell)
        n_target = min(len(candidates), limit)
    else:
        candidates = rng.uniform(0, 1, (200 * n_target, 3))
    if case.family == "pair":
        axis = int(rng.choice(np.flatnonzero(pbc))) if pbc.any() else 0
        candidates[:2, axis] = rng.uniform(0.0, 0.08), rng.uniform(0.92, 1.0)
    images = np.array(
        [s for s in itertools.product((-1, 0, 1), repeat=3) if not np.any(np.array(s)[~pbc])]
    )
    frac: list[np.ndarray] = []
    for u in candidates:
        if case.family in ("subdomain_faces", "cell_faces", "single") and rng.random() < 0.4:
            u = _snap(rng, case, u)
        if inside(u) and not _too_close(u, np.array(frac).reshape(-1, 3), cell, pbc, images):
            frac.append(u)
        if len(frac) == n_target:
            break
    frac_arr = np.array(frac).reshape(-1, 3)
    if case.family == "outside":
        for axis in range(3):
            u = frac_arr[:, axis]
            if pbc[axis]:
                low, high = u < 0.05, u > 0.95
                u[low] += 1.0
                u[high] -= 1.0
                far = rng.random(len(u)) < 0.1
                u[far] += rng.choice([-2.0, -1.0, 1.0, 2.0], int(far.sum()))
            else:
                u[u > 0.85] += rng.uniform(0.05, 0.3)
                u[u < 0.15] -= rng.uniform(0.05, 0.3)
    numbers = rng.choice(MACE_SPECIES if case.model.kind == "mace" else SPECIES, len(frac_arr))
    atoms = Atoms(numbers=numbers, positions=frac_arr @ cell, cell=cell, pbc=pbc)
    if case.cell_kind == "none":
        atoms.set_cell(np.zeros((3, 3)))
    elif not pbc.all() and rng.random() < 0.2:  # a zero cell vector on an open axis
        zeroed = atoms.cell.array.copy()
        zeroed[int(rng.choice(np.flatnonzero(~pbc)))] = 0.0
        atoms.set_cell(zeroed)
    if case.steps:
        thermalize_momenta(atoms, temperature_K=case.temperature, rng=rng)
    return atoms
