"""The derivative step of every distributed evaluation: what is wanted, the leaves it is
taken against, and the derivatives of a partial energy (one rank's owned atoms, one chunk's,
one LAMMPS rank's rows).

Forces are -dE/dx of the positions leaf; the stress is dE/dstrain / volume of a zero strain
applied to rows and cell; dE/dr per edge is the gradient of a zero leaf added to the edge
shifts, from which per-atom virials follow (`nvdd_plugins.models.virials`); with the heat
flux asked for, the energy's gradient is taken through the rows the model saw and per-atom
heat-flux tensors follow from three more backwards (`heat_flux.FluxTaps`).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.evaluation.heat_flux import FluxTaps
from nvdd_plugins.geometry import rows_times_3x3
from nvdd_plugins.models import (
    HEAT_FLUX_TENSORS,
    BaseModelMixin,
    atom_strain_shares,
    edge_vectors,
    pair_gradients_of,
    per_atom_stresses,
)

__all__ = ["Leaves", "Wanted", "edge_stresses"]


@dataclass(frozen=True)
class Wanted:
    """Which derivatives an evaluation takes by autograd.

    Attributes:
        forces: -dE/dx.
        stress: dE/dstrain / volume.
        stresses: per-atom stresses from the edge vectors (per-atom virials).
        heat_flux: per-atom heat-flux tensors (`HEAT_FLUX_TENSORS`), for any model whose
            energy is a sum of differentiable per-atom energies.
    """

    forces: bool
    stress: bool
    stresses: bool = False
    heat_flux: bool = False

    @classmethod
    def of(cls, model: BaseModelMixin, properties: Iterable[str]) -> Wanted:
        """What of `properties` the model leaves to autograd ("stresses": per-atom stresses
        from the edge vectors, for a model whose stress is derived)."""
        properties = set(properties)
        derived = model.model_config.autograd_outputs
        return cls(
            "forces" in properties and "forces" in derived,
            "stress" in properties and "stress" in derived,
            "stresses" in properties and "stress" in derived,
            HEAT_FLUX_TENSORS in properties,
        )


class Leaves:
    """The leaves of one forward: `positions` (forces are taken against them when they
    require grad), a zero strain when `stress`, a zero (n_edges, 3) leaf on the edge shifts
    when `pairs`; `flux`: the forward's refreshes are recorded for the heat flux."""

    def __init__(
        self,
        positions: torch.Tensor,
        stress: bool,
        pairs: int | None = None,
        flux: FluxTaps | None = None,
    ) -> None:
        self.positions = positions
        self.strain = _zero_leaf((1, 3, 3), positions) if stress else None
        self.pairs = None if pairs is None else _zero_leaf((pairs, 3), positions)
        self.flux = flux

    def strained(self, rows: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`rows` (n, 3) and `cell` (1, 3, 3) deformed by the symmetric part of the strain
        (x -> x (1 + eps)); unchanged without one."""
        if self.strain is None:
            return rows, cell
        sym = 0.5 * (self.strain + self.strain.transpose(1, 2))
        return rows + rows_times_3x3(rows, sym[0]), cell + rows_times_3x3(cell, sym[:, None])

    def shifted(self, shifts: torch.Tensor) -> torch.Tensor:
        """The edge `shifts` with the pair leaf added."""
        return shifts if self.pairs is None else shifts + self.pairs

    def derive(
        self, energies: torch.Tensor, cell: torch.Tensor, model: BaseModelMixin
    ) -> dict[str, torch.Tensor]:
        """ "forces" (-dE/dx, eV/Å), "stress" (dE/dstrain / volume of `cell`, eV/Å³),
        "pair_gradients" (dE/dr per edge) and, with `flux`, per-row heat-flux tensors of
        E, the sum of the partial's per-atom `energies`, for the leaves held; zero where
        the energy does not depend on a leaf. Pair gradients are zero when the energy
        depends on no geometry at all; a clear error when it depends on the positions but
        not on the shifts (`model` does not build its edge vectors from them)."""
        energy = energies.sum()
        want_forces = self.positions.requires_grad
        flux = self.flux
        through = self.positions if flux is None else flux.rows
        inputs = [through] if want_forces else []
        inputs += [leaf for leaf in (self.strain, self.pairs) if leaf is not None]
        if not inputs:
            return {}
        with nullcontext() if flux is None else flux.recording():
            raw = list(
                torch.autograd.grad(
                    energy, inputs, allow_unused=True, retain_graph=flux is not None
                )
            )
        out: dict[str, torch.Tensor] = {}
        if self.pairs is not None:
            gradient = raw.pop()
            if gradient is None and want_forces and raw[0] is None:
                gradient = torch.zeros_like(self.pairs)
            out["pair_gradients"] = pair_gradients_of(gradient, self.pairs, model)
        grads = [torch.zeros_like(x) if g is None else g for g, x in zip(raw, inputs, strict=False)]
        if want_forces and flux is not None:  # rows -> positions: the ghosts' to their owners
            rows_gradient = grads[0]
            (grads[0],) = torch.autograd.grad(
                flux.rows, self.positions, rows_gradient, retain_graph=True
            )
            out[HEAT_FLUX_TENSORS] = flux.tensors(energies, rows_gradient)
        if want_forces:
            out["forces"] = -grads[0]
        if self.strain is not None:
            volume = torch.linalg.det(cell.detach()).abs().view(-1, 1, 1)
            if bool((volume == 0).any()):
                raise ValueError(
                    "stress needs a cell with non-zero volume (an open cluster has none)"
                )
            out["stress"] = grads[-1] / volume
        return out


def edge_stresses(
    batch: Batch, pair_gradients: torch.Tensor, cell: torch.Tensor, n_rows: int
) -> torch.Tensor:
    """(n_rows, 3, 3) per-atom stresses S_i / volume (eV/Å³) from the edges of `batch` (one
    system in `cell` (1, 3, 3), `n_rows` rows) and their `pair_gradients` g_e = dE/dr_e."""
    shares = atom_strain_shares(batch.edge_index, edge_vectors(batch), pair_gradients, n_rows)
    return per_atom_stresses(shares, cell, batch.batch_idx)


def _zero_leaf(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    return torch.zeros(shape, dtype=like.dtype, device=like.device, requires_grad=True)
