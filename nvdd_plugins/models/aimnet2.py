"""`AIMNet2Wrapper`: AIMNet2 (aimnet) models as nvdd model wrappers.

The wrapper runs aimnet's own modules on nvdd's edge list and turns every energy term into
per-atom energies: the AEV convolutions as `index_add_` onto the centre atoms (refreshed
after every pass), the charge equilibration's per-molecule sums all-reduced over ranks
(`aimnet2_spec`), and Coulomb as aimnet's local damped shifted force or as an Ewald or PME
lattice sum (its structure factors or charge mesh all-reduced over ranks, as the charge
sums are). docs/aimnet2.md says how each term is distributed.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import torch
from torch import nn

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.models.aimnet2_coulomb import (
    dsf_coulomb,
    lattice_coulomb,
    pairs_within,
    short_range_coulomb,
)
from nvdd_plugins.models.base import (
    BaseModelMixin,
    ModelConfig,
    ModelInputs,
    NeighborConfig,
    host_checks_allowed,
)
from nvdd_plugins.models.ewald import Ewald
from nvdd_plugins.models.pme import PME
from nvdd_plugins.models.seeding import seeded_weights
from nvdd_plugins.models.species import known_species, require_species, species_lookup
from nvdd_plugins.spec import (
    ENERGY_KINDS,
    GLOBAL_SUM_ADAPTERS,
    DistributionSpec,
    MLIPSpec,
    OutputKind,
    PythonAdapter,
    for_strategy,
    summed_over_ranks,
)

__all__ = [
    "AIMNet2Wrapper",
    "aimnet2_spec",
    "aimnet_electrostatics",
    "mol_sum_over_ranks",
    "random_aimnet2",
]


def mol_sum_over_ranks(x: torch.Tensor, data: dict[str, torch.Tensor]) -> torch.Tensor:
    """aimnet's `nbops.mol_sum` in the wrapper's layout (rows of molecule `data["mol_idx"]`,
    one row of `data["charge"]` per molecule): the owned rows' sum, summed over ranks."""
    # the molecule count from a shape, not `data["_num_mol"]`: reading a tensor's value
    # would break a compiled graph
    out = x.new_zeros(data["charge"].shape[0], *x.shape[1:])
    return summed_over_ranks(out.index_add_(0, data["mol_idx"], x))


def aimnet2_spec(strategy: StrategyKind | None = None) -> MLIPSpec:
    """The halo spec of AIMNet2: per-molecule sums of the charge equilibration all-reduced
    (`mol_sum_over_ranks`), every per-pair sum onto `edge_index[0]`, per-atom "charges"; no
    `n_layers` (the sums are global: no fixed ghost shell serves without exchange)."""
    distribution = DistributionSpec(
        custom_ops=GLOBAL_SUM_ADAPTERS,
        third_party_helpers=(
            PythonAdapter(target="aimnet.nbops:mol_sum", replacement=mol_sum_over_ranks),
        ),
        edge_target_row=0,  # neighbour sums and pair energies go onto the centre atom i
    )
    kinds = {**ENERGY_KINDS, "charges": OutputKind.PER_NODE}
    return for_strategy(MLIPSpec(distribution=distribution, output_kinds=kinds), strategy)


class AIMNet2Wrapper(nn.Module, BaseModelMixin):
    """Wrap an aimnet `AIMNet2` model (e.g. `AIMNet2Calculator(...).model`, `random_aimnet2()`).

    Args:
        model: the AIMNet2 model; its output heads may be `Output`, `AtomicShift`,
            `AtomicSum` (skipped: nvdd sums), `SRCoulomb` and `LRCoulomb` with method "dsf",
            "ewald" or "pme", all onto "energy".
        coulomb: the external Coulomb term aimnet's calculator adds (its `external_coulomb`
            after `set_lrcoulomb_method(...)`), or None.
        charge: total charge of each system (e).
        mult: spin multiplicity of each system (models with two charge channels).
        electrostatics: the parameters of an "ewald" or "pme" Coulomb term, fixed (aimnet
            estimates them from the atom count at every call): `Ewald(alpha, k_cutoff,
            k_set="box")` or `PME(alpha, mesh, 5, scheme="nvalchemiops")` for aimnet's own
            sums; `aimnet_electrostatics` gives those it picks for a configuration.
        real_space_cutoff: the real-space cutoff of that term (Å).

    For inference, like aimnet's calculator: the model's parameters are frozen.
    """

    def __init__(
        self,
        model: nn.Module,
        coulomb: nn.Module | None = None,
        charge: float = 0.0,
        mult: float = 1.0,
        electrostatics: Ewald | PME | None = None,
        real_space_cutoff: float | None = None,
    ) -> None:
        super().__init__()
        from aimnet.models.aimnet2 import AIMNet2  # optional dependency
        from aimnet.modules import AtomicShift, AtomicSum, LRCoulomb, Output, SRCoulomb

        if not isinstance(model, AIMNet2):
            raise TypeError(f"expected an aimnet AIMNet2 model, got {type(model).__name__}")
        self.model = model.requires_grad_(False)
        self.coulomb = coulomb.requires_grad_(False) if coulomb is not None else None
        self.charge, self.mult = float(charge), float(mult)
        heads = [*model.outputs.children(), *([coulomb] if coulomb is not None else [])]
        methods = []
        for head in heads:
            if not isinstance(head, Output | AtomicShift | AtomicSum | SRCoulomb | LRCoulomb):
                raise ValueError(f"unsupported AIMNet2 output module {type(head).__name__}")
            if head.key_out != "energy" or getattr(head, "reduce_sum", False):
                raise ValueError(f"{type(head).__name__} must add per-atom terms to 'energy'")
            if isinstance(head, LRCoulomb):
                methods.append(head.method)
        self.electrostatics = _lattice_sum(methods, electrostatics, real_space_cutoff)
        self.real_space_cutoff = float(real_space_cutoff or 0.0)
        self.aev_cutoff = float(model.aev.rc_s)
        cutoff = max(
            [self.aev_cutoff, self.real_space_cutoff]
            + [h.dsf_rc for h in heads if isinstance(h, LRCoulomb) and h.method == "dsf"]
        )
        self.model_config = ModelConfig(
            autograd_outputs=frozenset({"forces", "stress"}),
            autograd_inputs=frozenset({"positions"}),
            # aimnet's cutoff functions weigh pairs beyond their cutoffs exactly zero
            # (clamped); the real-space lattice sum drops them
            neighbor_config=NeighborConfig(cutoff=float(cutoff), accepts_skin_pairs=True),
            edge_energy=self.electrostatics is None,  # a reciprocal sum is not a pair sum
        )
        # the elements of the embedding, or of the metadata's "implemented_species" (aimnet's
        # calculator checks the latter too)
        metadata = getattr(model, "metadata", None) or {}
        known = metadata.get("implemented_species") or range(1, model.afv.num_embeddings)
        device = next(model.parameters()).device
        lookup = species_lookup({int(z): 0 for z in known}, device)
        self.register_buffer("species_index", lookup, persistent=False)

    @classmethod
    def from_calculator(
        cls,
        calc: Any,
        charge: float = 0.0,
        mult: float = 1.0,
        electrostatics: Ewald | PME | None = None,
        real_space_cutoff: float | None = None,
    ) -> AIMNet2Wrapper:
        """The model and external Coulomb of an aimnet `AIMNet2Calculator` (call its
        `set_lrcoulomb_method("dsf" | "ewald" | "pme")` first; the last two need their
        parameters fixed: `electrostatics`, `real_space_cutoff`). External DFT-D3
        dispersion is refused here: compose the wrapper with a `DFTD3Model` instead."""
        if calc.external_dftd3 is not None:
            raise ValueError(
                "the calculator adds DFT-D3 dispersion, which AIMNet2Wrapper leaves out: build "
                "the wrapper from a calculator without it and add a DFTD3Model with SumModel"
            )
        coulomb = calc.external_coulomb
        return cls(calc.model, coulomb, charge, mult, electrostatics, real_space_cutoff)

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom energies (eV), per-system energy and per-atom charges (e)."""
        from aimnet.modules import AtomicShift, LRCoulomb, Output, SRCoulomb

        inputs = self.adapt_input(batch)
        if host_checks_allowed():
            self.check_species(inputs.atomic_numbers)
        i, j = inputs.edge_index
        r_ij = inputs.positions[j] - inputs.positions[i] + inputs.shifts
        d_ij = torch.linalg.vector_norm(r_ij, dim=-1)
        n = inputs.positions.shape[0]
        pairs = _Pairs(*pairs_within(d_ij < self.aev_cutoff, i, j, r_ij, d_ij), n)
        data = self._charges_and_features(inputs, pairs)
        energies = torch.zeros(n, dtype=torch.float64, device=d_ij.device)
        for head in [*self.model.outputs.children(), self.coulomb]:
            if isinstance(head, Output | AtomicShift):
                data["energy"] = energies.to(inputs.positions.dtype)
                energies = head(data)["energy"].to(torch.float64)
            elif isinstance(head, SRCoulomb) or (isinstance(head, LRCoulomb) and head.subtract_sr):
                sr = short_range_coulomb(head, pairs.i, pairs.j, pairs.d_ij, data["charges"], n)
                energies = energies - sr
            if isinstance(head, LRCoulomb) and self.electrostatics is None:
                energies = energies + dsf_coulomb(head, i, j, d_ij, data["charges"], n)
            elif isinstance(head, LRCoulomb):
                pairs_lr = (i, j, d_ij)
                energies = energies + lattice_coulomb(
                    self.electrostatics, self.real_space_cutoff, inputs, pairs_lr, data["charges"]
                )
        energies = energies.to(inputs.positions.dtype)
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy, "charges": data["charges"]}

    def check_species(self, numbers: torch.Tensor) -> None:
        """Raise a ValueError naming the elements of `numbers` the model has no parameters for."""
        require_species(self.species_index, numbers, "AIMNet2")

    def supported_species(self) -> tuple[int, ...]:
        """The atomic numbers the model has parameters for."""
        return known_species(self.species_index)

    def _charges_and_features(self, inputs: ModelInputs, pairs: _Pairs) -> dict[str, Any]:
        """aimnet's passes (`AIMNet2.forward_prepared` on the wrapper's layout): "charges"
        after equilibration, "aim" the features of the energy heads."""
        model = self.model
        numbers = inputs.atomic_numbers
        data: dict[str, Any] = {
            "numbers": numbers,
            "mol_idx": inputs.batch_idx,
            "_nb_mode": torch.tensor(1),
            "_num_mol": torch.tensor(inputs.num_graphs),
            "_input_padded": torch.tensor(False),
            "charge": inputs.positions.new_full((inputs.num_graphs,), self.charge),
            "mult": inputs.positions.new_full((inputs.num_graphs,), self.mult),
        }
        a = model.afv(numbers)
        # a reshape: Tensor.unflatten's Python body (super().unflatten) breaks a compiled graph
        shape = (a.shape[0], model.nfeature, model.nshifts_s)
        data["a"] = a.reshape(shape) if model.d2features else a
        if model.num_charge_channels == 2:
            data = model._preprocess_spin_polarized_charge(data)
        else:
            data["charge"] = data["charge"].unsqueeze(-1)
        g_sv = model.aev._calc_aev(pairs.r_ij, pairs.d_ij, {"mask_ij": pairs.d_ij < 0})
        last = len(model.mlps) - 1
        for ipass, mlp in enumerate(model.mlps):
            parts = [data["a"].flatten(1), pairs.convolve(model.conv_a, data["a"], g_sv)]
            if ipass > 0:
                parts += [data["charges"], pairs.convolve(model.conv_q, data["charges"], g_sv)]
            out = mlp(torch.cat(parts, dim=-1))
            if ipass < last:
                data = model._update_q(data, out, delta_q=ipass > 0)
            else:
                data["aim"] = out
        if model.num_charge_channels == 2:
            data = model._postprocess_spin_polarized_charge(data)
        else:
            data["charges"] = data["charges"].squeeze(-1)
        return data

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`aimnet2_spec(strategy)`."""
        return aimnet2_spec(strategy)


def _lattice_sum(
    methods: list[str], electrostatics: Ewald | PME | None, real_space_cutoff: float | None
) -> Ewald | PME | None:
    """The lattice sum of the Coulomb heads' `methods` (None for "dsf"); raises a ValueError
    for a method that is not distributed or parameters that do not fit it."""
    for method in methods:
        if method not in ("dsf", "ewald", "pme"):
            raise ValueError(
                f"Coulomb method {method!r} is not local (a sum over all pairs); select "
                "aimnet's damped shifted force ('dsf') or a lattice sum ('ewald', 'pme')"
            )
    lattice = [m for m in methods if m != "dsf"]
    if not lattice:
        if electrostatics is not None:
            raise ValueError("electrostatics are given, but no Coulomb head uses 'ewald' or 'pme'")
        return None
    wanted = {"ewald": Ewald, "pme": PME}[lattice[0]]
    if len(methods) > 1 or not isinstance(electrostatics, wanted) or not real_space_cutoff:
        raise ValueError(
            f"the Coulomb method {lattice[0]!r} needs its parameters fixed: pass "
            f"electrostatics={wanted.__name__}(...) and real_space_cutoff (Å), e.g. those "
            "aimnet picks for a configuration, aimnet_electrostatics(calc, atoms)"
        )
    return electrostatics


def aimnet_electrostatics(calc: Any, atoms: Any) -> tuple[Ewald | PME, float]:
    """The Ewald or PME parameters and real-space cutoff (Å) aimnet's calculator `calc`
    (method "ewald" or "pme") picks for the ase `atoms` (nvalchemi-toolkit-ops' estimate
    from the atom count, the cell and the Coulomb head's `ewald_accuracy`), as the
    `electrostatics` and `real_space_cutoff` of `AIMNet2Wrapper`."""
    from nvalchemiops.torch.interactions.electrostatics import (  # optional dependency
        estimate_ewald_parameters,
        estimate_pme_parameters,
    )

    head = calc.external_coulomb
    if head is None or head.method not in ("ewald", "pme"):
        raise ValueError("call calc.set_lrcoulomb_method('ewald' or 'pme') first")
    positions = torch.tensor(atoms.positions, dtype=torch.float64)
    cell = torch.tensor(atoms.cell.array, dtype=torch.float64)
    accuracy = float(head.ewald_accuracy)
    if head.method == "ewald":
        params = estimate_ewald_parameters(positions, cell, accuracy=accuracy)
        alpha, k_cutoff = float(params.alpha[0]), float(params.reciprocal_space_cutoff[0])
        return Ewald(alpha, k_cutoff, k_set="box"), float(params.real_space_cutoff[0])
    params = estimate_pme_parameters(positions, cell, accuracy=accuracy)
    pme = PME(float(params.alpha[0]), tuple(params.mesh_dimensions), 5, scheme="nvalchemiops")
    return pme, float(params.real_space_cutoff[0])


class _Pairs:
    """The pairs (i, j) within the AEV cutoff: vectors r_ij = x_j - x_i (+ shift)."""

    def __init__(
        self, i: torch.Tensor, j: torch.Tensor, r_ij: torch.Tensor, d_ij: torch.Tensor, n: int
    ) -> None:
        self.i, self.j, self.r_ij, self.d_ij, self.n_atoms = i, j, r_ij, d_ij, n

    def convolve(self, conv: nn.Module, features: torch.Tensor, g_sv: torch.Tensor) -> Any:
        """aimnet's `ConvSV` on these pairs: neighbour features times the AEV basis, summed
        onto the centre atom (an aggregation nvdd refreshes), then `ConvSV`'s projection."""
        f_j = features[self.j]  # (pairs, channels, shifts) or (pairs, channels)
        f_j = f_j.unsqueeze(-1) if conv.d2features else f_j[:, :, None, None]
        per_pair = f_j * g_sv.unsqueeze(1)  # g_sv: (pairs, shifts, 4)
        summed = per_pair.new_zeros(self.n_atoms, *per_pair.shape[1:])
        summed = summed.index_add_(0, self.i, per_pair)
        return conv._finish_convolution({}, summed, 1)


def random_aimnet2(
    cutoff: float = 4.0,
    sr_cutoff: float = 3.6,
    nfeature: int = 4,
    nshifts: int = 4,
    hidden: int = 16,
    num_charge_channels: int = 1,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> nn.Module:
    """A random-weight AIMNet2 from aimnet's bundled `aimnet2.yaml`, shrunk, in the layout of
    aimnet's released models: heads `Output`, `AtomicShift`, `AtomicSum`, `SRCoulomb`
    (short-range Coulomb below `sr_cutoff` embedded, the full Coulomb left to the calculator:
    metadata "sr_embedded"). Nothing is downloaded. Weights depend only on `seed`."""
    import aimnet.models  # optional dependency
    from aimnet.config import build_module, load_yaml

    config = load_yaml(os.path.join(os.path.dirname(aimnet.models.__file__), "aimnet2.yaml"))
    kwargs = config["kwargs"]
    kwargs.update(
        nfeature=nfeature,
        ncomb_v=nshifts,
        hidden=[[hidden], [hidden], [hidden, hidden]],
        aim_size=hidden,
        aev={"rc_s": float(cutoff), "nshifts_s": nshifts},
        num_charge_channels=num_charge_channels,
    )
    energy = copy.deepcopy(kwargs["outputs"]["energy_mlp"])
    energy["kwargs"].update(n_in=hidden, mlp={**energy["kwargs"]["mlp"], "hidden": [hidden]})
    sr = {"rc": float(sr_cutoff), "key_in": "charges", "key_out": "energy", "envelope": "exp"}
    kwargs["outputs"] = {
        "energy_mlp": energy,
        "atomic_shift": kwargs["outputs"]["atomic_shift"],
        "atomic_sum": kwargs["outputs"]["atomic_sum"],
        "srcoulomb": {"class": "aimnet.modules.SRCoulomb", "kwargs": sr},
    }
    with seeded_weights(seed):
        model = build_module(config)
    model = model.to(dtype)
    model.cutoff = float(cutoff)
    model.__dict__["_metadata"] = {
        "cutoff": float(cutoff),
        "needs_coulomb": True,
        "needs_dispersion": False,
        "coulomb_mode": "sr_embedded",
        "coulomb_sr_rc": float(sr_cutoff),
        "coulomb_sr_envelope": "exp",
    }
    return model
