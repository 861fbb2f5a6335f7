"""The ghost shell as a value: how a rank's ghost rows get what its owned atoms' energies
need.

`PerLayerRefresh`: one cutoff (+ skin) of ghosts, whose rows are overwritten with their
owners' rows after every aggregation onto atoms (one exchange per layer). `ThickShell`:
n_layers cutoffs of ghosts, so every owned atom's receptive field is on the rank and the
forward needs no exchange; its rows may be cut into spatial chunks (`ChunkedRows`), views
evaluated one after another, so that device memory is bounded by one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nvdd_plugins.config import DomainConfig
from nvdd_plugins.models import BaseModelMixin
from nvdd_plugins.spec import AllReduceSum, MLIPSpec

__all__ = ["PerLayerRefresh", "Shell", "ThickShell", "refuse_global_sums", "shell_for"]


@dataclass(frozen=True)
class PerLayerRefresh:
    """One cutoff of ghosts, refreshed from their owners after each aggregation onto atoms."""

    def halo_width(self, config: DomainConfig) -> float:
        """The ghost shell's width, Å: `config.halo_width`."""
        return config.halo_width


@dataclass(frozen=True)
class ThickShell:
    """`n_layers` cutoffs of ghosts and no exchange during the forward.

    Attributes:
        n_layers: the model's message-passing layers (cutoffs an atom's energy can see).
        chunk_rows: most rows per chunk; "auto": from the free device memory and the
            model's measured bytes per row (all rows on a CPU); None: all rows at once.
    """

    n_layers: int
    chunk_rows: int | Literal["auto"] | None = None

    def halo_width(self, config: DomainConfig) -> float:
        """The ghost shell's width, Å: `n_layers` cutoffs of `config` plus its skin."""
        return self.n_layers * config.cutoff + config.skin


Shell = PerLayerRefresh | ThickShell


def shell_for(model: BaseModelMixin, spec: MLIPSpec, config: DomainConfig) -> Shell:
    """The shell `config` asks for: a `ThickShell` with `config.chunk_atoms`, or a clear
    error when the model cannot be evaluated without exchange during its forward."""
    if config.chunk_atoms is None:
        return PerLayerRefresh()
    refuse_global_sums(model, spec, "chunk_atoms")
    n_layers = max(spec.n_layers or 0, config.halo_layers or 0)
    if not n_layers:
        raise ValueError(
            "chunk_atoms evaluates per-atom outputs that depend only on atoms within the "
            "model's message-passing layers x cutoff; its spec does not declare its layers "
            "(MLIPSpec.n_layers): give DomainConfig(halo_layers=...)"
        )
    return ThickShell(n_layers, config.chunk_atoms)


def refuse_global_sums(model: BaseModelMixin, spec: MLIPSpec, asked_by: str) -> None:
    """Raise when the spec of `model` sums over the whole system during the forward, which
    no thick shell holds (`asked_by`: the setting that asked for one)."""
    if any(
        isinstance(transform, AllReduceSum)
        for adapter in spec.distribution.custom_ops
        for transform in (*adapter.arg_transforms.values(), *adapter.output_transforms.values())
    ):
        raise ValueError(
            f"{asked_by} cannot evaluate {type(model).__name__}: its spec sums over the "
            "whole system during the forward (an OpAdapter with AllReduceSum, e.g. charge "
            "equilibration), which a chunk cannot see"
        )
