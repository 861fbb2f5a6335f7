"""The torture model zoo: small float64 model wrappers described by a frozen `ModelSpec`.

`TortureMPNN` is a message-passing model whose layers each aggregate with one op of `OPS`
(every node-indexed scatter form torch offers), onto receivers (edge_index[0]) or senders
(edge_index[1]). Messages use both endpoints' features and a smooth cosine envelope that is
exactly zero at and beyond the cutoff. Ops that are non-deterministic with duplicate indices
(copy, put without accumulate, scatter) get a unique index set: per target node the edge of
minimum length (near ties broken by a fixed direction). The zoo also holds `SimpleMPNN`
(minimum image), the Morse-like `ShiftPairModel`, the shipped Lennard-Jones kernel model,
a tiny MACE, a tiny SevenNet, a tiny AIMNet2 and tiny NequIP and Allegro models (the last
four not drawn at random: they run on chosen cases).
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from nvdd_plugins import Batch
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.geometry.cell import minimum_image
from nvdd_plugins.models import (
    BaseModelMixin,
    LennardJonesModel,
    ModelConfig,
    NeighborConfig,
    RadiusGraphMPNN,
    SimpleMPNN,
)
from nvdd_plugins.spec import SPEC_MPNN_HALO, DistributionSpec, MLIPSpec, OpAdapter, for_strategy
from nvdd_plugins.spec.policies import HaloStoragePolicy
from nvdd_plugins.spec.transforms import ScatterOutputs
from tests.helpers.systems import ShiftPairModel

CUSTOM_OP = "torture::edge_scatter"
"""The opaque custom op (an index_add over edges inside), registered below."""
SUM_OPS = ("index_add_", "index_add", "scatter_add_", "scatter_add", "index_put_+", "index_put+")
UNIQUE_OPS = ("index_copy_", "index_copy", "index_put_", "index_put", "scatter_", "scatter")
_SELF = {"self": True, "noself": False}
SCATTER_REDUCE_OPS = tuple(
    f"{name}:{reduce}:{inc}"
    for name in ("scatter_reduce_", "scatter_reduce")
    for reduce in ("sum", "prod", "mean", "amax", "amin")
    for inc in _SELF
)
INDEX_REDUCE_OPS = tuple(
    f"{name}:{reduce}:{inc}"
    for name in ("index_reduce_", "index_reduce")
    for reduce in ("prod", "mean", "amax", "amin")
    for inc in _SELF
)
OP_GROUPS = (SUM_OPS, UNIQUE_OPS, SCATTER_REDUCE_OPS, INDEX_REDUCE_OPS, (CUSTOM_OP,))
SPECIES, MACE_SPECIES = (6, 18, 29), (18, 29)
"""Atomic numbers of the cases' atoms (MACE cases: its two species)."""
OPS = tuple(op for group in OP_GROUPS for op in group)
"""Every aggregation op the zoo covers; "+" marks index_put(accumulate=True)."""

MODEL_KINDS = ("mpnn", "simple", "pair", "lj", "mace")
"""The zoo's model families drawn for every path (see `ModelSpec.build`); graph-partition
cases draw "radius_graph" (`RadiusGraphMPNN`, which builds its own graph) where others draw
"simple"."""
_TIE_BREAK = (0.8017, 0.5113, 0.3094)
warnings.filterwarnings("ignore", message=r"index_reduce\(\) is in beta")


@torch.library.custom_op(CUSTOM_OP, mutates_args=())
def edge_scatter(src: torch.Tensor, index: torch.Tensor, n_nodes: int) -> torch.Tensor:
    """Opaque edge -> node sum: row k is the sum of the `src` rows whose index is k."""
    return src.new_zeros((n_nodes, *src.shape[1:])).index_add_(0, index, src)


@edge_scatter.register_fake
def _(src: torch.Tensor, index: torch.Tensor, n_nodes: int) -> torch.Tensor:
    return src.new_empty((n_nodes, *src.shape[1:]))


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[1])


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
    (index,) = ctx.saved_tensors
    return grad[index], None, None


edge_scatter.register_autograd(_backward, setup_context=_setup_context)

_ENERGY_KINDS = dict(SPEC_MPNN_HALO.output_kinds)
SPEC_CUSTOM_OP = MLIPSpec(
    distribution=DistributionSpec(
        policy=HaloStoragePolicy(),
        custom_ops=(
            OpAdapter(
                op=torch.ops.torture.edge_scatter.default,
                arg_transforms={},
                output_transforms={0: ScatterOutputs()},
            ),
        ),
    ),
    output_kinds=_ENERGY_KINDS,
)
"""SPEC_MPNN_HALO plus an adapter declaring the custom op's output node-indexed."""


def op_is_skin_safe(op: str) -> bool:
    """Whether pairs beyond the cutoff (zero-weight messages) leave the op's result bit-exact."""
    if op in SUM_OPS or op in UNIQUE_OPS or op == CUSTOM_OP:
        return True
    _, reduce, inc = op.split(":")
    return inc == "self" and reduce in ("sum", "prod")


def _unique(t: torch.Tensor, vectors: torch.Tensor, n: int) -> torch.Tensor:
    """Edge mask: per target node, the edge of minimum length; near ties (periodic self-images
    at +-L are exact ties in one process) go to the largest projection on a fixed direction,
    so exactly one edge per target is kept however the lengths round."""
    with torch.no_grad():
        d = vectors.norm(dim=-1)
        nearest = d.new_full((n,), math.inf).scatter_reduce_(0, t, d, "amin")
        near = d <= nearest[t] + 1e-9
        key = torch.where(near, vectors @ vectors.new_tensor(_TIE_BREAK), -math.inf)
        best = key.new_full((n,), -math.inf).scatter_reduce_(0, t, key, "amax")
        return near & (key == best[t])


def _aggregate(
    op: str,
    h: torch.Tensor,
    t: torch.Tensor,
    m: torch.Tensor,
    vectors: torch.Tensor,
    functional: bool,
) -> torch.Tensor:
    """Aggregate edge messages `m` onto nodes `t` with `op` (in-place results are rebound).
    Out-of-place ops are called as `torch.<op>(...)` when `functional`, else as methods."""
    n = h.shape[0]
    if op == CUSTOM_OP:
        return torch.ops.torture.edge_scatter.default(m, t, n)
    name, _, reduction = op.partition(":")
    if op in UNIQUE_OPS:
        keep = _unique(t, vectors.detach(), n)
        t, m = t[keep], m[keep]
    accumulate = name.endswith("+")
    name = name.rstrip("+")
    extra: tuple[str, ...] = ()
    options: dict[str, bool] = {}
    if reduction:
        reduce, inc = reduction.split(":")
        prod = reduce == "prod"
        target = 1.0 + 0.1 * torch.tanh(h) if prod else 0.5 * torch.tanh(h)
        m = 1.0 + 0.5 * m if prod else m
        extra, options = (reduce,), {"include_self": _SELF[inc]}
    else:
        target = h.new_zeros(h.shape)
    if name.startswith("index_put"):
        args: tuple = ((t,), m, accumulate)
    elif name.startswith("index"):
        args = (0, t, m, *extra)
    else:
        args = (0, t.unsqueeze(-1).expand_as(m), m, *extra)
    if name.endswith("_") or not functional:
        return getattr(target, name)(*args, **options)
    return getattr(torch, name)(target, *args, **options)


class _Layer(nn.Module):
    """One message-passing layer with a chosen aggregation op and direction."""

    def __init__(
        self, hidden: int, n_radial: int, op: str, onto_senders: bool, functional: bool
    ) -> None:
        super().__init__()
        self.message = nn.Linear(2 * hidden + n_radial, hidden)
        self.update = nn.Linear(2 * hidden, hidden)
        self.op, self.onto_senders, self.functional = op, onto_senders, functional

    def forward(
        self,
        h: torch.Tensor,
        radial: torch.Tensor,
        envelope: torch.Tensor,
        vectors: torch.Tensor,
        edge_index: torch.Tensor,
    ) -> torch.Tensor:
        """h + update(h, aggregate(messages))."""
        t, o = (edge_index[1], edge_index[0]) if self.onto_senders else edge_index
        features = torch.cat([h[t], h[o], radial], dim=-1)
        messages = torch.tanh(self.message(features)) * envelope.unsqueeze(-1)
        agg = _aggregate(self.op, h, t, messages, vectors, self.functional)
        return h + torch.tanh(self.update(torch.cat([h, agg], dim=-1)))


class TortureMPNN(nn.Module, BaseModelMixin):
    """Message passing with one aggregation op per layer (see module docstring)."""

    def __init__(self, spec: ModelSpec, hidden: int = 8, n_radial: int = 6) -> None:
        super().__init__()
        state = torch.random.get_rng_state()
        torch.manual_seed(spec.seed)
        self.embedding = nn.Embedding(31, hidden)
        self.layers = nn.ModuleList(
            _Layer(hidden, n_radial, op, target == "senders", k % 2 == 0)
            for k, (op, target) in enumerate(zip(spec.ops, spec.targets, strict=True))
        )
        self.readout = nn.Linear(hidden, 1)
        torch.random.set_rng_state(state)
        self.minimum_image = spec.minimum_image
        self.register_buffer("centers", torch.linspace(0.0, spec.cutoff, n_radial))
        self.width = spec.cutoff / n_radial
        self.uses_custom_op = CUSTOM_OP in spec.ops
        self.model_config = ModelConfig(
            autograd_outputs=frozenset({"forces", "stress"}),
            autograd_inputs=frozenset({"positions"}),
            neighbor_config=NeighborConfig(spec.cutoff, accepts_skin_pairs=spec.skin_safe),
        )

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom energies over all rows and their per-system sums (eV)."""
        inputs = self.adapt_input(batch)
        i, j = inputs.edge_index
        x = inputs.positions
        if self.minimum_image:
            vectors = minimum_image(x[j] - x[i], inputs.cell[0], inputs.pbc[0])
        else:
            vectors = x[j] - x[i] + inputs.shifts
        distance = vectors.norm(dim=-1)
        envelope = 0.5 * (torch.cos(math.pi * distance / self.cutoff) + 1.0)
        envelope = envelope * (distance < self.cutoff)
        radial = torch.exp(-(((distance.unsqueeze(-1) - self.centers) / self.width) ** 2))
        h = self.embedding(inputs.atomic_numbers)
        for layer in self.layers:
            h = layer(h, radial, envelope, vectors, inputs.edge_index)
        energies = 0.05 * self.readout(h).squeeze(-1)
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """SPEC_MPNN_HALO, with the custom op's adapter when a layer uses it, for `strategy`."""
        return for_strategy(SPEC_CUSTOM_OP if self.uses_custom_op else SPEC_MPNN_HALO, strategy)


@dataclass(frozen=True)
class ModelSpec:
    """A zoo model: `kind` in MODEL_KINDS, "sevennet", "aimnet2", "nequip" (2 convolutions),
    the pretrained "sevennet0" (SevenNet-0, 5 convolutions) or "chgnet" (CHGNet 0.3.0, 4
    blocks; its bond graph asks for a 12 Å shell itself), "pair_d3" (`SumModel` of the shift pair
    model and PBE-D3(BJ) with coordination numbers within the cutoff and pairs within it + 1.5 Å:
    two parts with their own cutoffs and specs, D3's two layers deep),
    or "allegro" (2 layers, strictly local: one cutoff of ghosts), "uma" (fairchem's eSCN-MD,
    2 blocks after its edge-degree embedding: 3 cutoffs), its cutoff (Å), and for
    "mpnn" one op and one target ("receivers"/"senders") per layer; `minimum_image` picks
    minimum-image pair vectors instead of the neighbour list's shifts. Weights are drawn
    from `seed`."""

    kind: str
    cutoff: float
    ops: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    minimum_image: bool = False
    seed: int = 0

    @property
    def skin_safe(self) -> bool:
        """Whether the model may be given pairs beyond its cutoff (all ops skin-safe)."""
        return all(op_is_skin_safe(op) for op in self.ops)

    @property
    def n_layers(self) -> int:
        """Message-passing layers: cutoffs an atom's energy can see."""
        if self.kind in ("mpnn", "simple", "radius_graph"):
            return max(1, len(self.ops))
        if self.kind in ("aimnet2", "uma"):
            return 3
        if self.kind in ("sevennet0", "chgnet"):
            return 5 if self.kind == "sevennet0" else 4
        return 2 if self.kind in ("mace", "sevennet", "nequip", "pair_d3") else 1

    @property
    def cuequivariance(self) -> bool:
        """MACE cases with an odd seed run the cuEquivariance conversion (when installed)."""
        return self.kind == "mace" and self.seed % 2 == 1 and cueq_available()

    @property
    def needs_wide_cells(self) -> bool:
        """Minimum-image models need periodic widths above twice the cutoff."""
        minimum_image_kinds = ("simple", "radius_graph")
        return self.kind in minimum_image_kinds or (self.kind == "mpnn" and self.minimum_image)

    def label(self) -> str:
        """A short one-line description."""
        if self.kind == "mpnn":
            layers = ",".join(
                f"{op}@{'s' if t == 'senders' else 'r'}"
                for op, t in zip(self.ops, self.targets, strict=True)
            )
            return f"mpnn[{layers}]{'/mic' if self.minimum_image else ''} rc={self.cutoff}"
        if self.kind == "mace":
            return f"mace{'/cueq' if self.cuequivariance else ''} rc={self.cutoff}"
        layers = f" layers={len(self.ops)}" if self.kind in ("simple", "radius_graph") else ""
        return f"{self.kind}{layers} rc={self.cutoff}"

    def build(self) -> nn.Module:
        """The float64 model."""
        if self.kind == "mpnn":
            return TortureMPNN(self).double()
        if self.kind == "simple":
            n_layers = max(1, len(self.ops))
            return SimpleMPNN(self.cutoff, hidden=8, n_layers=n_layers, seed=self.seed).double()
        if self.kind == "pair_d3":
            from nvdd_plugins.models import SumModel
            from tests.helpers.dispersion import small_d3

            pair = ShiftPairModel(self.cutoff)
            return SumModel(pair, small_d3(cutoff=self.cutoff + 1.5, cn_cutoff=self.cutoff))
        if self.kind == "radius_graph":
            n_layers = max(1, len(self.ops))
            return RadiusGraphMPNN(self.cutoff, n_layers=n_layers, seed=self.seed).double()
        if self.kind == "pair":
            return ShiftPairModel(self.cutoff)
        if self.kind == "lj":
            return LennardJonesModel(0.01, 2.2, self.cutoff, shift=True)
        if self.kind == "mace":
            from nvdd_plugins.models import MACEWrapper
            from tests.helpers.mace_models import tiny_mace

            return MACEWrapper(tiny_mace(self.seed), cuequivariance=self.cuequivariance)
        if self.kind == "sevennet":
            from nvdd_plugins.models import SevenNetWrapper, random_sevennet

            model = random_sevennet(SPECIES, cutoff=self.cutoff, seed=self.seed)
            return SevenNetWrapper(model)
        if self.kind == "sevennet0":
            from tests.helpers.sevennet_models import pretrained_sevennet

            return pretrained_sevennet()
        if self.kind == "chgnet":
            from tests.helpers.chgnet_models import pretrained_chgnet

            return pretrained_chgnet()
        if self.kind in ("nequip", "allegro"):
            from nvdd_plugins import models

            wrapper = models.NequIPWrapper if self.kind == "nequip" else models.AllegroWrapper
            build = models.random_nequip if self.kind == "nequip" else models.random_allegro
            return wrapper(build(SPECIES, cutoff=self.cutoff, seed=self.seed))
        if self.kind == "uma":
            from nvdd_plugins.models import UMAWrapper, random_uma, uma_config

            model = random_uma(uma_config(cutoff=self.cutoff), seed=self.seed)
            return UMAWrapper(model, task_name="omat")
        if self.kind == "aimnet2":
            from tests.helpers.aimnet_models import torture_aimnet2

            return torture_aimnet2(self.cutoff, self.seed)
        raise ValueError(f"unknown zoo model kind {self.kind!r}")


def cueq_available() -> bool:
    """Whether cuequivariance-torch imports."""
    return importlib.util.find_spec("cuequivariance_torch") is not None


def sevenn_available() -> bool:
    """Whether sevenn imports (it refuses the e3nn that mace-torch pins)."""
    try:
        import sevenn  # noqa: F401
    except (ImportError, ValueError):
        return False
    return True


def nequip_available() -> bool:
    """Whether nequip and nequip-allegro are installed (make install-e3nn)."""
    return all(importlib.util.find_spec(name) is not None for name in ("nequip", "allegro"))


def fairchem_available() -> bool:
    """Whether fairchem-core is installed (make install-uma)."""
    return importlib.util.find_spec("fairchem") is not None


def aimnet_available() -> bool:
    """Whether aimnet is installed (the aimnet extra)."""
    return importlib.util.find_spec("aimnet") is not None


def mace_available() -> bool:
    """Whether mace-torch imports."""
    try:
        import mace  # noqa: F401
    except ImportError:
        return False
    return True
