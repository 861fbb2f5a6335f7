"""`SevenNetWrapper`: SevenNet (sevenn) models as nvdd model wrappers.

The wrapper hands sevenn's layers the prebuilt graph: edge vectors `x[j] - x[i] + shifts`
for each edge (i, j) (sevenn's own convention, so its edge preprocessing is not needed) and
one-hot species in the model's dtype (sevenn's own embedding always makes float32, so float64
runs need this). It runs the layers up to sevenn's per-atom energies; the framework sums them
and derives forces and stress by autograd, so sevenn's total-energy sum and its force/stress
head are skipped. Every sevenn aggregation onto atoms is the `message_gather` of its
convolutions, onto `edge_index[0]`; the spec marks it, so eager forwards need no per-op
interception.

`SevenNetWrapper.from_pretrained(name)` loads a checkpoint that sevenn's wheel ships, by the
names sevenn's own calculator takes ("7net-0", "7net-l3i5", "7net-mf-0", ...); a name whose
checkpoint sevenn would download is refused (nvdd downloads nothing). Pretrained models are
float32, as sevenn computes; `dtype=torch.float64` converts them (exact comparisons).
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from unittest import mock

import torch
from torch import nn

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.models.base import (
    BaseModelMixin,
    ModelConfig,
    NeighborConfig,
    host_checks_allowed,
)
from nvdd_plugins.models.seeding import seeded_weights
from nvdd_plugins.models.species import known_species, require_species, species_lookup
from nvdd_plugins.spec import (
    SPEC_MPNN_HALO,
    MLIPSpec,
    PythonAdapter,
    for_strategy,
    scattered_onto_nodes,
)

__all__ = [
    "SevenNetWrapper",
    "marked_message_gather",
    "pretrained_sevennet_path",
    "random_sevennet",
    "sevennet_spec",
]


class SevenNetWrapper(nn.Module, BaseModelMixin):
    """Wrap a sevenn `AtomGraphSequential` (e3nn convolutions).

    Args:
        model: a sevenn model (float32 or float64), e.g. from
            `sevenn.model_build.build_E3_equivariant_model` or a checkpoint's `build_model()`.
        modality: for a multi-fidelity model (sevenn's `modal_map`, e.g. SevenNet-MF-0's
            "PBE" and "R2SCAN"), the fidelity to evaluate; None for a single-fidelity model.

    Like sevenn's own calculator, the wrapper is for inference: it freezes the model's
    parameters (requires_grad False). sevenn's polynomial cutoff does not vanish beyond the
    cutoff, so pairs in the Verlet skin are dropped before every evaluation.
    """

    def __init__(self, model: nn.Module, modality: str | None = None) -> None:
        super().__init__()
        from sevenn.nn.edge_embedding import EdgePreprocess  # optional dependency
        from sevenn.nn.force_output import (
            ForceOutput,
            ForceStressOutput,
            ForceStressOutputFromEdge,
        )
        from sevenn.nn.linear import AtomReduce
        from sevenn.nn.node_embedding import OnehotEmbedding

        if model.type_map is None:
            raise ValueError("the sevenn model has no type_map (atomic number -> species)")
        modal_map = dict(model.modal_map or {})
        if modal_map and modality not in modal_map:
            raise ValueError(
                f"this multi-fidelity SevenNet model needs modality= one of {sorted(modal_map)}"
                f", got {modality!r}"
            )
        if not modal_map and modality is not None:
            raise ValueError(f"modality={modality!r} given, but the model has one fidelity only")
        self.modality = modality
        self.modal_index = modal_map.get(modality, 0)
        self.n_modalities = len(modal_map)
        self.model = model.requires_grad_(False)
        skipped = (
            EdgePreprocess,
            OnehotEmbedding,
            AtomReduce,
            ForceOutput,
            ForceStressOutput,
            ForceStressOutputFromEdge,
        )
        self.layer_names = [
            name for name, m in model.named_children() if not isinstance(m, skipped)
        ]
        lookup = species_lookup(model.type_map, next(model.parameters()).device)
        self.register_buffer("species_index", lookup, persistent=False)
        self.n_species = len(model.type_map)
        self.model_config = ModelConfig.by_autograd(NeighborConfig(cutoff=float(model.cutoff)))

    @classmethod
    def from_pretrained(
        cls,
        name: str = "7net-0",
        modality: str | None = None,
        dtype: torch.dtype = torch.float32,
        cueq: bool = False,
    ) -> SevenNetWrapper:
        """A pretrained SevenNet shipped in sevenn's wheel, by the name sevenn's calculator
        takes ("7net-0" = "7net-0_11Jul2024", "7net-0_22May2024", "7net-l3i5", "7net-mf-0"
        with modality "PBE" or "R2SCAN"); `dtype`: float32 as trained, or float64; `cueq`:
        sevenn's cuEquivariance tensor products (its `enable_cueq`; CUDA only)."""
        return cls.from_checkpoint(pretrained_sevennet_path(name), modality, dtype, cueq)

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike[str],
        modality: str | None = None,
        dtype: torch.dtype = torch.float32,
        cueq: bool = False,
    ) -> SevenNetWrapper:
        """A sevenn checkpoint file (`sevenn.util.load_checkpoint`) on the CPU in `dtype`;
        `cueq` as in `from_pretrained`."""
        from sevenn.util import load_checkpoint  # optional dependency

        if not os.path.isfile(path):
            raise FileNotFoundError(f"no SevenNet checkpoint at {os.fspath(path)!r}")
        if cueq:
            from sevenn.nn.cue_helper import is_cue_available

            if not is_cue_available():  # sevenn itself would fall back to e3nn with a warning
                raise RuntimeError(
                    "SevenNet with cueq=True needs cuequivariance-torch and a CUDA device"
                )
        with eager_e3nn():
            model = load_checkpoint(os.fspath(path)).build_model(enable_cueq=cueq)
        return cls(model.to(dtype).eval(), modality)

    def check_species(self, numbers: torch.Tensor) -> None:
        """Raise a ValueError naming the elements of `numbers` the model has no parameters for."""
        require_species(self.species_index, numbers, "SevenNet")

    def supported_species(self) -> tuple[int, ...]:
        """The atomic numbers the model has parameters for."""
        return known_species(self.species_index)

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom and per-system energies (eV), sevenn's shift and scale included."""
        from sevenn import _keys as keys  # optional dependency

        inputs = self.adapt_input(batch)
        if host_checks_allowed():
            self.check_species(inputs.atomic_numbers)
        species = self.species_index[inputs.atomic_numbers]
        one_hot = nn.functional.one_hot(species, self.n_species).to(inputs.positions.dtype)
        sender, receiver = inputs.edge_index
        data = {
            keys.NODE_FEATURE: one_hot,
            keys.NODE_ATTR: one_hot,
            keys.ATOM_TYPE: species,
            keys.EDGE_IDX: inputs.edge_index,
            keys.EDGE_VEC: inputs.positions[receiver] - inputs.positions[sender] + inputs.shifts,
            keys.BATCH: inputs.batch_idx,
        }
        if self.n_modalities:
            modal = species.new_full((inputs.num_graphs,), self.modal_index)
            data[keys.MODAL_TYPE] = modal
            data[keys.MODAL_ATTR] = nn.functional.one_hot(modal, self.n_modalities).to(
                one_hot.dtype
            )
        for name in self.layer_names:
            data = self.model.get_submodule(name)(data)
        energies = data[keys.ATOMIC_ENERGY].reshape(-1)
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`sevennet_spec()` with the model's convolutions as `n_layers` and the storage
        policy of `strategy`."""
        from sevenn.nn.convolution import IrrepsConvolution  # optional dependency

        n_layers = sum(isinstance(m, IrrepsConvolution) for m in self.model.modules())
        return for_strategy(sevennet_spec(n_layers=n_layers), strategy)


@contextlib.contextmanager
def eager_e3nn() -> Iterator[None]:
    """Build sevenn's modules with e3nn's jit mode "eager", whatever the process's global mode
    is (building a nequip model sets it to "script"): scripted e3nn modules hold
    ScriptFunctions, which cannot be pickled (LAMMPS model files, spawned ranks) nor compiled."""
    import e3nn

    mode = e3nn.get_optimization_defaults()["jit_mode"]
    e3nn.set_optimization_defaults(jit_mode="eager")
    try:
        yield
    finally:
        e3nn.set_optimization_defaults(jit_mode=mode)


def pretrained_sevennet_path(name: str) -> str:
    """The checkpoint file of sevenn's pretrained model `name`, resolved by sevenn's own
    name table; a ValueError for a model not shipped in sevenn's wheel (sevenn would
    download it: nvdd never does) or an unknown name."""
    try:
        import sevenn.util  # optional dependency
    except ImportError as missing:
        raise ImportError(
            f"pretrained SevenNet needs sevenn ({missing}): `make install-e3nn`, then run "
            "with .venv-e3nn/bin/python"
        ) from None

    def refuse(path: str, url: str) -> str:
        raise ValueError(
            f"SevenNet {name!r} is not shipped in sevenn's wheel: sevenn would download it "
            f"from {url}, and nvdd downloads nothing at run time. Download it once yourself "
            f"and load the file: SevenNetWrapper.from_checkpoint(path)"
        )

    with mock.patch.object(sevenn.util, "download_checkpoint", refuse):
        try:
            return sevenn.util.pretrained_name_to_path(name)
        except FileNotFoundError as missing:  # a shipped name whose file is gone
            raise ValueError(f"sevenn's checkpoint for {name!r} is missing: {missing}") from None
        except ValueError as err:
            if "not shipped" in str(err):
                raise
            known = ", ".join(sevenn.util.get_available_pretrained_models())
            raise ValueError(f"unknown SevenNet model {name!r}; sevenn knows {known}") from None


def marked_message_gather(
    node_features: torch.Tensor, edge_dst: torch.Tensor, message: torch.Tensor
) -> torch.Tensor:
    """sevenn's `message_gather` (messages summed onto the rows `edge_dst`, the same ops),
    its result rebound and marked as a node aggregation."""
    from sevenn.nn.util import broadcast  # optional dependency

    out = node_features.new_zeros(len(node_features), *message.shape[1:])
    out = out.scatter_reduce(0, broadcast(edge_dst, message, 0), message, reduce="sum")
    return scattered_onto_nodes(out)


def sevennet_spec(n_layers: int | None = None) -> MLIPSpec:
    """`SPEC_MPNN_HALO` with sevenn's convolution aggregation marked (so eager forwards run
    without op interception) and messages written onto `edge_index[0]` only (so edges into
    ghost rows are dropped); `n_layers`: the model's convolutions."""
    marked = PythonAdapter(
        target="sevenn.nn.convolution:message_gather", replacement=marked_message_gather
    )
    distribution = replace(
        SPEC_MPNN_HALO.distribution,
        third_party_helpers=(marked,),
        aggregations_marked=True,
        edge_target_row=0,  # sevenn: edge_dst, edge_src = edge_index
    )
    return replace(SPEC_MPNN_HALO, distribution=distribution, n_layers=n_layers)


@dataclass(frozen=True)
class SevenNetArchitecture:
    """The sizes of a `random_sevennet` model: node feature `channels`, `lmax`, the number
    of convolutions, the radial network's hidden widths and the convolution denominator."""

    channels: int = 4
    lmax: int = 1
    num_convolutions: int = 2
    radial_hidden: tuple[int, ...] = (8,)
    avg_num_neighbors: float = 12.0


def random_sevennet(
    species: Sequence[int],
    cutoff: float = 4.5,
    architecture: SevenNetArchitecture = SevenNetArchitecture(),
    shift: Sequence[float] | None = None,
    scale: Sequence[float] | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> nn.Module:
    """A random-weight sevenn NequIP-type model (sevenn's default layers, shrunk) for tests
    and examples; nothing is downloaded. `shift`/`scale`: per species, in the order of
    `species` (eV). Weights depend only on `seed` (the global RNG state is kept)."""
    from sevenn import _keys as keys  # optional dependency
    from sevenn._const import DEFAULT_E3_EQUIVARIANT_MODEL_CONFIG
    from sevenn.model_build import build_E3_equivariant_model

    n = len(species)
    config = copy.deepcopy(DEFAULT_E3_EQUIVARIANT_MODEL_CONFIG)
    config.update(
        {
            keys.CUTOFF: float(cutoff),
            keys.NODE_FEATURE_MULTIPLICITY: architecture.channels,
            keys.LMAX: architecture.lmax,
            keys.NUM_CONVOLUTION: architecture.num_convolutions,
            keys.CONVOLUTION_WEIGHT_NN_HIDDEN_NEURONS: list(architecture.radial_hidden),
            keys.CONV_DENOMINATOR: float(architecture.avg_num_neighbors),
            keys.NUM_SPECIES: n,
            keys.TYPE_MAP: {int(z): i for i, z in enumerate(species)},
            keys.SHIFT: [0.0] * n if shift is None else [float(s) for s in shift],
            keys.SCALE: [1.0] * n if scale is None else [float(s) for s in scale],
        }
    )
    with seeded_weights(seed), eager_e3nn():
        model = build_E3_equivariant_model(config)
    return model.to(dtype)
