"""`MACEWrapper`: mace-torch models (MACE, ScaleShiftMACE) as nvdd model wrappers.

The wrapper hands mace its prebuilt graph and returns per-atom energies. The spec marks
mace's aggregations onto atoms (`scatter_sum`; cuEquivariance's fused convolution: `cueq`),
so eager runs need no per-op interception and go through mace's own LAMMPS code path
(`nvdd_plugins.spec.owned_rows`): owned rows only, features exchanged once per interaction.
"""

from __future__ import annotations

import copy
import inspect
import threading
from collections.abc import Sequence
from os import PathLike
from typing import Any

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
from nvdd_plugins.models.species import known_species, require_species, species_lookup
from nvdd_plugins.spec import (
    SPEC_MPNN_HALO,
    DistributionSpec,
    MethodAdapter,
    MLIPSpec,
    OpAdapter,
    OwnedRows,
    PythonAdapter,
    for_strategy,
    owned_rows,
    scattered_onto_nodes,
)

__all__ = ["MACEWrapper", "mace_spec", "marked_scatter_sum"]

# mace's compile preparation (torch.fx tracing) patches torch.nn.Module.__call__ process-wide
_PREPARE_LOCK = threading.Lock()


class MACEWrapper(nn.Module, BaseModelMixin):
    """Wrap a mace-torch model.

    Args:
        model: a mace `MACE` / `ScaleShiftMACE` module (float32 or float64), e3nn or
            cuEquivariance (mace's `convert_e3nn_cueq`).
        head: head name for multi-head models (default: the first head).
        cuequivariance: convert an e3nn model to cuEquivariance first (same weights; fused
            convolution on CUDA: 7–10× faster than e3nn on a GPU).

    For inference, like mace's calculator: the model's parameters are frozen (a quarter less
    memory per atom). Pairs beyond `r_max` get exactly zero weight in mace (its polynomial
    cutoff is multiplied by r < r_max, its radial MLP has no biases): Verlet pairs are taken.
    """

    def __init__(
        self, model: nn.Module, head: str | None = None, cuequivariance: bool = False
    ) -> None:
        super().__init__()
        if not (isinstance(model, nn.Module) and hasattr(model, "atomic_numbers")):
            raise TypeError(
                "MACEWrapper takes a mace-torch model (an nn.Module with atomic_numbers and "
                f"r_max), got a {type(model).__name__}; for a file saved with "
                "torch.save(model), use MACEWrapper.from_file(path)"
            )
        if cuequivariance and not _uses_cuequivariance(model):
            from nvdd_plugins.models.cueq import to_cuequivariance  # optional dependency

            model = to_cuequivariance(model)
        self.model = model.requires_grad_(False)
        self.cuequivariance = _uses_cuequivariance(model)
        type_map = {int(z): k for k, z in enumerate(model.atomic_numbers)}
        lookup = species_lookup(type_map, next(model.parameters()).device)
        self.register_buffer("species_index", lookup, persistent=False)
        self.n_species = len(type_map)
        heads = list(getattr(model, "heads", ["default"]))
        self.head = head
        self.head_index = heads.index(head) if head is not None else 0
        # mace's LAMMPS code path computes per-atom work on owned rows only
        self._owned_rows_mode = "lammps_mliap" in inspect.signature(model.forward).parameters
        self.model_config = ModelConfig.by_autograd(
            NeighborConfig(float(model.r_max), accepts_skin_pairs=True, prune_skin_pairs=True)
        )
        self._compile_ready = False  # this wrapper is a prepare_for_compile copy
        self._prepared: tuple[tuple[int, ...], MACEWrapper] | None = None  # (versions, copy)

    @classmethod
    def from_file(
        cls,
        path: str | PathLike[str],
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
        head: str | None = None,
        cuequivariance: bool = False,
    ) -> MACEWrapper:
        """Load a mace model saved with `torch.save(model)` (mace-torch's `.model` files, a
        trusted file: it is unpickled with weights_only=False, as mace's own calculator
        does; plain `torch.load(path)` refuses such a file)."""
        import mace  # noqa: F401  (optional dependency; sets mace's torch.load defaults)

        try:
            model = torch.load(path, map_location=device, weights_only=False)
        except OSError:
            raise
        except Exception as err:  # unpickling fails in as many ways as a file can be wrong
            raise ValueError(
                f"cannot read {path} as a model saved with torch.save(model): "
                f"{type(err).__name__}: {err}"
            ) from err
        if not isinstance(model, nn.Module):
            raise ValueError(
                f"{path} holds a {type(model).__name__}, not a mace-torch model saved with "
                "torch.save(model)"
            )
        return cls(model.to(dtype), head=head, cuequivariance=cuequivariance)

    def check_species(self, numbers: torch.Tensor) -> None:
        """Raise a ValueError naming the elements of `numbers` the model has no parameters for."""
        require_species(self.species_index, numbers, "MACE")

    def supported_species(self) -> tuple[int, ...]:
        """The atomic numbers the model has parameters for."""
        return known_species(self.species_index)

    def prepare_for_compile(self) -> MACEWrapper:
        """A copy of the wrapper prepared for torch.compile the way mace prepares its own
        (`mace.tools.compile`: e3nn code generation off; an e3nn model rebuilt with
        fx-simplified blocks, a cuEquivariance one simplified as it is); same weights and
        dtype.

        Made once (again when the weights change or move) under a process-wide lock: threads
        (simulated ranks) share it; it returns itself."""
        if self._compile_ready:
            return self
        with _PREPARE_LOCK:
            # in-place changes (load_state_dict too) bump the weights' versions
            state = tuple(t._version for t in (*self.model.parameters(), *self.model.buffers()))
            if self._prepared is None or self._prepared[0] != state:
                self._prepared = (state, self._prepared_copy())
            return self._prepared[1]

    def _apply(self, fn: Any, recurse: bool = True) -> MACEWrapper:
        self._prepared = None  # .to(), .double(), ...: the weights move
        return super()._apply(fn, recurse)

    def _prepared_copy(self) -> MACEWrapper:
        from mace.tools import compile as mace_compile  # optional dependency
        from mace.tools.scripts_utils import extract_model

        parameter = next(self.model.parameters())
        if self.cuequivariance:  # as mace's calculator compiles its accelerated backends
            mace_compile.configure_autograd_for_compile(allow_autograd=True)
            with mace_compile.disable_e3nn_codegen():
                model = mace_compile.simplify(_copy_sharing_cuequivariance(self.model))
        else:
            model = mace_compile.prepare(extract_model)(
                model=self.model, map_location=parameter.device
            )
        model = model.to(device=parameter.device, dtype=parameter.dtype)
        prepared = MACEWrapper(model, head=self.head)
        prepared._compile_ready = True
        return prepared

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom and per-system energies (eV), E0 included."""
        inputs = self.adapt_input(batch)
        numbers = inputs.atomic_numbers
        if host_checks_allowed():
            self.check_species(numbers)
        species = self.species_index[numbers]
        dtype = inputs.positions.dtype
        data = {
            "positions": inputs.positions,
            "edge_index": inputs.edge_index,
            "shifts": inputs.shifts,
            "unit_shifts": torch.zeros_like(inputs.shifts),
            "cell": inputs.cell.reshape(-1, 3),
            "node_attrs": nn.functional.one_hot(species, self.n_species).to(dtype),
            "batch": inputs.batch_idx,
            "ptr": inputs.ptr,
            "head": torch.full((inputs.num_graphs,), self.head_index, device=numbers.device),
        }
        with owned_rows() as rows:
            if rows is not None and self._owned_rows_mode:
                energies = self._owned_node_energies(data, rows)
            else:
                energies = self.model(data, training=False, compute_force=False)["node_energy"]
        energies = energies.to(dtype)
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def _owned_node_energies(self, data: dict[str, Any], rows: OwnedRows) -> torch.Tensor:
        """Per-atom energies through mace's own LAMMPS code path (ghost rows' are zero)."""
        positions, (sender, receiver) = data["positions"], data["edge_index"]
        n_ghost = rows.n_rows - rows.n_owned
        data["vectors"] = positions[receiver] - positions[sender] + data["shifts"]
        data["natoms"] = (rows.n_owned, n_ghost)
        data["lammps_class"] = _GhostExchange(rows)
        data["batch"] = data["batch"][: rows.n_owned]
        out = self.model(data, training=False, compute_force=False, lammps_mliap=True)
        owned = out["node_energy"]
        return torch.cat([owned, owned.new_zeros(n_ghost)])

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`mace_spec` (`cueq_mace_spec` for cuEquivariance) of the model's interactions."""
        n_layers = len(self.model.interactions)
        if self.cuequivariance:
            from nvdd_plugins.models.cueq import cueq_mace_spec  # optional dependency

            return for_strategy(cueq_mace_spec(n_layers), strategy)
        return for_strategy(mace_spec(n_layers=n_layers), strategy)


def marked_scatter_sum(
    src: torch.Tensor,
    index: torch.Tensor,
    dim: int = -1,
    out: torch.Tensor | None = None,
    dim_size: int | None = None,
    reduce: str = "sum",
) -> torch.Tensor:
    """mace's `scatter_sum`, its result marked as a node aggregation."""
    from mace.tools.scatter import scatter_sum  # optional dependency

    return scattered_onto_nodes(scatter_sum(src, index, dim, out, dim_size, reduce))


def mace_spec(
    kernels: Sequence[OpAdapter] = (),
    helpers: Sequence[MethodAdapter] = (),
    n_layers: int | None = None,
) -> MLIPSpec:
    """`SPEC_MPNN_HALO` with mace's `scatter_sum` marked and messages written onto receivers,
    plus `kernels` and `helpers` of a backend; `n_layers`: the model's interactions."""
    marked = tuple(
        PythonAdapter(target=f"{module}:scatter_sum", replacement=marked_scatter_sum)
        for module in ("mace.modules.blocks", "mace.modules.wrapper_ops")
    )
    return MLIPSpec(
        distribution=DistributionSpec(
            policy=SPEC_MPNN_HALO.distribution.policy,
            custom_ops=tuple(kernels),
            third_party_helpers=(*marked, *helpers),
            aggregations_marked=True,
            edge_target_row=1,  # mace: sender, receiver = edge_index
        ),
        output_kinds=SPEC_MPNN_HALO.output_kinds,
        n_layers=n_layers,
    )


class _GhostExchange:
    """What mace's LAMMPS code path calls to exchange node features (its `LAMMPS_MP`
    autograd function): ghost rows from their owners, and the adjoint in backward."""

    def __init__(self, rows: OwnedRows) -> None:
        self.rows = rows

    def forward_exchange(self, features: torch.Tensor, out: torch.Tensor, width: int) -> None:
        """`out` = `features` with ghost rows from their owners."""
        out.copy_(self.rows.refresh(features))

    def reverse_exchange(self, grad: torch.Tensor, out: torch.Tensor, width: int) -> None:
        """`out` = `grad` with ghost rows summed into their owners' rows."""
        out.copy_(self.rows.refresh_adjoint(grad))


def _from_cuequivariance(module: nn.Module) -> bool:
    """Whether `module` is one of cuequivariance-torch's."""
    return type(module).__module__.startswith("cuequivariance_torch")


def _uses_cuequivariance(model: nn.Module) -> bool:
    """Whether any submodule of `model` comes from cuequivariance-torch."""
    return any(_from_cuequivariance(m) for m in model.modules())


def _copy_sharing_cuequivariance(model: nn.Module) -> nn.Module:
    """A deep copy of a cuEquivariance mace model that shares its cuEquivariance modules.

    Those deep-copy by construction anew: under the default kernel name, and without the
    forward that mace's conversion set on each fused convolution's instance (the copy's
    interactions would call the bare polynomial with the fused call's arguments). Shared,
    they stay as mace built them; their weights are the model's own."""
    shared = {id(module): module for module in model.modules() if _from_cuequivariance(module)}
    return copy.deepcopy(model, shared)
