"""`CHGNetWrapper`: CHGNet (chgnet) as an nvdd model wrapper, pretrained models included.

CHGNet (chgnet 0.4.2) has an atom graph (pairs within 6 Å) and a bond graph: every two bonds
shorter than 3 Å at one atom make an angle, and bond features are updated from the angles at
both of their atoms. The wrapper builds both graphs from nvdd's pair list (each undirected
bond is a pair of opposite edges; angles are ordered pairs of short edges leaving one atom)
and runs chgnet's own layers on them: its embeddings, basis expansions, `AtomConv`,
`BondConv`, `AngleUpdate` and readout. Per-atom energies are the readout MLP plus the
composition model's reference energy of each atom's element; magnetic moments (μB) are
chgnet's site-wise head after the last bond update. Forces and stress come from nvdd's
autograd of the owned energies, so chgnet's own autograd head is skipped.

Under domain decomposition the atom features are refreshed after each atom convolution as
for any message-passing model, but bond features are not atom rows: a bond's features after
k bond updates depend on bonds up to k bond-graph hops (3 Å each) away. The wrapper
therefore asks for the 3 Å pairs between ghost rows too (`ghost_pair_cutoff`) and a ghost
shell of n_conv x 3 Å = 12 Å (two 6 Å cutoffs, `ghost_layers`), which makes every bond an
owned atom's energy needs exact (docs/chgnet.md).
"""

from __future__ import annotations

import math

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
from nvdd_plugins.spec import SPEC_MPNN_HALO, MLIPSpec, OutputKind

__all__ = ["CHGNET_PRETRAINED", "CHGNetWrapper", "chgnet_graphs"]

CHGNET_PRETRAINED = ("0.3.0", "0.2.0", "r2scan")
"""The checkpoints chgnet 0.4.2's wheel ships (`chgnet/pretrained/`), by chgnet's names."""


class CHGNetWrapper(nn.Module, BaseModelMixin):
    """Wrap a `chgnet.model.CHGNet` (energies summed over atoms: `mlp_first`).

    Args:
        model: a CHGNet, e.g. `CHGNet.load(model_name="0.3.0")`; float32 as trained, or
            converted with `.double()`.

    Outputs "energies" (eV, the composition model's reference energies included),
    "energy" and "magmoms" (μB, per atom). Parameters are frozen (inference).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        if not model.mlp_first:
            raise ValueError(
                "this CHGNet pools its atom features before the readout (mlp_first=False): "
                "its energy is not a sum of per-atom energies, which domain decomposition "
                "needs"
            )
        if model.composition_model is not None and not model.composition_model.fitted:
            raise ValueError("the CHGNet's composition model is not fitted")
        self.model = model.requires_grad_(False).eval()
        converter = model.graph_converter
        self.bond_cutoff = float(converter.bond_graph_cutoff)
        atom_cutoff = float(converter.atom_graph_cutoff)
        n_conv = len(model.atom_conv_layers)
        # after k bond updates a bond sees bonds up to k hops of bond_cutoff away; the last
        # atom convolution reads the bonds at an owned atom (n_conv - 1 updates)
        reach = max(atom_cutoff, n_conv * self.bond_cutoff)
        neighbors = NeighborConfig(
            cutoff=atom_cutoff,
            ghost_pair_cutoff=self.bond_cutoff,
            ghost_layers=math.ceil(reach / atom_cutoff - 1e-9),
        )
        self.model_config = ModelConfig.by_autograd(neighbors)

    @classmethod
    def from_pretrained(
        cls, name: str = "0.3.0", dtype: torch.dtype = torch.float32
    ) -> CHGNetWrapper:
        """A pretrained CHGNet shipped in chgnet's wheel ("0.3.0", "0.2.0", "r2scan"), on
        the CPU in `dtype` (float32 as trained, or float64)."""
        if name not in CHGNET_PRETRAINED:
            raise ValueError(
                f"unknown CHGNet model {name!r}; chgnet's wheel ships {list(CHGNET_PRETRAINED)}"
            )
        try:
            from chgnet.model import CHGNet  # optional dependency
        except ImportError as missing:
            raise ImportError(
                f"CHGNet needs chgnet ({missing}): `make install-chgnet`, then run with "
                ".venv-chgnet/bin/python"
            ) from None
        model = CHGNet.load(model_name=name, use_device="cpu", verbose=False)
        return cls(model.to(dtype))

    def prepare_for_compile(self) -> CHGNetWrapper:
        """Refused: the bond graph and the angles are built from the pair list each call
        (bonds by matching each pair with its reverse, angles from the pairs under 3 Å), with
        sizes that depend on the data, and compile's padded pair list is not symmetric."""
        raise ValueError(
            "CHGNetWrapper cannot run with compile=True: its bond and angle graphs are built "
            "from the pair list at every call with data-dependent sizes; run it with "
            "compile=False"
        )

    def supported_species(self) -> tuple[int, ...]:
        """Atomic numbers 1-94 (chgnet's embedding)."""
        return tuple(range(1, self.model.atom_embedding.embedding.num_embeddings + 1))

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom and per-system energies (eV) and per-atom magnetic moments (μB)."""
        model = self.model
        inputs = self.adapt_input(batch)
        numbers = inputs.atomic_numbers.long()
        if host_checks_allowed() and numbers.numel():
            top = model.atom_embedding.embedding.num_embeddings
            if int(numbers.min()) < 1 or int(numbers.max()) > top:
                raise ValueError(f"CHGNet has parameters for atomic numbers 1-{top} only")
        sender, receiver = inputs.edge_index
        vectors = inputs.positions[receiver] - inputs.positions[sender] + inputs.shifts
        graphs = chgnet_graphs(inputs.edge_index, vectors, self.bond_cutoff, len(numbers))

        atom_feas = model.atom_embedding(numbers - 1)
        lengths = graphs.lengths
        bond_bases_ag = model.bond_basis_expansion.rbf_expansion_ag(lengths)
        bond_bases_bg = model.bond_basis_expansion.rbf_expansion_bg(lengths)
        bond_feas = model.bond_embedding(bond_bases_ag)
        bond_weights_ag = model.bond_weights_ag(bond_bases_ag)
        bond_weights_bg = model.bond_weights_bg(bond_bases_bg)
        directions = -vectors / vectors.norm(dim=1, keepdim=True)  # chgnet: centre - neighbour
        angle_feas = model.angle_embedding(
            model.angle_basis_expansion(directions[graphs.left], directions[graphs.right])
        )
        atom_graph = inputs.edge_index.t()
        has_angles = len(graphs.bond_graph) > 0
        # the last block is an atom convolution only; the magnetic moments read the atom
        # features before it
        n_conv = len(model.atom_conv_layers)
        blocks = zip(
            model.atom_conv_layers,
            [*model.bond_conv_layers, None],
            [*model.angle_layers, None],
            strict=True,
        )
        for index, (atom_layer, bond_layer, angle_layer) in enumerate(blocks):
            if index == n_conv - 1:
                magmoms = torch.abs(model.site_wise(atom_feas)).reshape(-1)
            atom_feas = atom_layer(
                atom_feas=atom_feas,
                bond_feas=bond_feas,
                bond_weights=bond_weights_ag,
                atom_graph=atom_graph,
                directed2undirected=graphs.directed2undirected,
            )
            if has_angles and bond_layer is not None:
                bond_feas = bond_layer(
                    atom_feas=atom_feas,
                    bond_feas=bond_feas,
                    bond_weights=bond_weights_bg,
                    angle_feas=angle_feas,
                    bond_graph=graphs.bond_graph,
                )
                if angle_layer is not None:
                    angle_feas = angle_layer(
                        atom_feas=atom_feas,
                        bond_feas=bond_feas,
                        angle_feas=angle_feas,
                        bond_graph=graphs.bond_graph,
                    )
        if model.readout_norm is not None:
            atom_feas = model.readout_norm(atom_feas)
        energies = model.mlp(atom_feas).reshape(-1)
        if model.composition_model is not None:
            energies = energies + model.composition_model.fc.weight[0, numbers - 1]
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy, "magmoms": magmoms}

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`SPEC_MPNN_HALO` with "magmoms" per atom and the atom convolutions as `n_layers`
        (a thick shell without refreshes, `chunk_atoms`, needs n_conv x 6 Å); graph
        partition is refused (its views hold no pairs between ghosts)."""
        if strategy is StrategyKind.GRAPH_PARTITION:
            raise ValueError(
                "CHGNet's bond graph needs the pairs between ghost atoms, which graph "
                "partition does not list: use the halo strategy"
            )
        kinds = {**SPEC_MPNN_HALO.output_kinds, "magmoms": OutputKind.PER_NODE}
        return MLIPSpec(
            distribution=SPEC_MPNN_HALO.distribution,
            output_kinds=kinds,
            n_layers=len(self.model.atom_conv_layers),
        )


class CHGNetGraphs:
    """chgnet's graph tensors for nvdd's pair list: `directed2undirected` (per edge: its
    bond), `lengths` (per bond, Å), `bond_graph` (per angle: atom, bond, bond) and the two
    edges of each angle (`left`, `right`)."""

    def __init__(
        self,
        directed2undirected: torch.Tensor,
        lengths: torch.Tensor,
        bond_graph: torch.Tensor,
        left: torch.Tensor,
        right: torch.Tensor,
    ) -> None:
        self.directed2undirected = directed2undirected
        self.lengths = lengths
        self.bond_graph = bond_graph
        self.left = left
        self.right = right


def chgnet_graphs(
    edge_index: torch.Tensor, vectors: torch.Tensor, bond_cutoff: float, n_rows: int
) -> CHGNetGraphs:
    """Bonds and angles of the pair list `edge_index` (2, E) with edge vectors (E, 3).

    Each edge (i, j) and its opposite (j, i, -vector) are one bond. Angles are the ordered
    pairs of distinct edges shorter than `bond_cutoff` leaving one atom. When the bond count
    equals `n_rows` one unused bond is appended, so that the bond aggregation never looks
    like an aggregation onto atom rows (whose ghost rows the halo refresh overwrites).
    """
    with torch.no_grad():
        reverse = _reverse_edges(edge_index, vectors.detach())
        n_edges = edge_index.shape[1]
        edge_ids = torch.arange(n_edges, device=edge_index.device)
        first = edge_ids <= reverse  # the edge that stands for its bond
        bond_of_first = torch.cumsum(first.long(), 0) - 1
        directed2undirected = torch.where(first, bond_of_first, bond_of_first[reverse])
        representative = edge_ids[first]
        short = vectors.detach().norm(dim=1) < bond_cutoff
        left, right = _angle_pairs(edge_index[0], short)
    lengths = vectors[representative].norm(dim=1)
    if lengths.shape[0] == n_rows:
        lengths = torch.cat([lengths, lengths.new_full((1,), bond_cutoff)])
    bond_graph = torch.stack(
        [edge_index[0][left], directed2undirected[left], directed2undirected[right]], dim=1
    )
    return CHGNetGraphs(directed2undirected, lengths, bond_graph, left, right)


def _reverse_edges(edge_index: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """For each edge (i, j, v) the index of (j, i, -v): both are ordered by (lower atom,
    higher atom, the vector pointing from the lower to the higher) and matched by rank."""
    sender, receiver = edge_index
    swap = sender > receiver
    # an edge from an atom to its own image: orient by the sign of the first non-zero component
    same = sender == receiver
    if bool(same.any()):
        sign = torch.sign(vectors[same])
        leading = torch.gather(sign, 1, (sign != 0).int().argmax(1, keepdim=True)).reshape(-1)
        swap[same] = leading < 0
    oriented = torch.where(swap.unsqueeze(1), -vectors, vectors)
    keys = [
        torch.minimum(sender, receiver),
        torch.maximum(sender, receiver),
        *torch.round(oriented * 1e6).long().unbind(1),
        swap.long(),
    ]
    order = torch.arange(len(sender), device=sender.device)
    for key in reversed(keys):  # stable sorts, least significant key first
        order = order[torch.argsort(key[order], stable=True)]
    # sorted, every bond is two neighbours: (not swapped, swapped)
    if len(order) % 2 or bool((swap[order[0::2]] | ~swap[order[1::2]]).any()):
        raise ValueError("the pair list is not symmetric: every pair (i, j) needs (j, i)")
    reverse = torch.empty_like(order)
    reverse[order[0::2]] = order[1::2]
    reverse[order[1::2]] = order[0::2]
    return reverse


def _angle_pairs(source: torch.Tensor, short: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every ordered pair (e1, e2), e1 != e2, of short edges with the same source atom."""
    edges = torch.nonzero(short).reshape(-1)
    edges = edges[torch.argsort(source[edges], stable=True)]
    _, counts = torch.unique_consecutive(source[edges], return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    per_edge = torch.repeat_interleave(counts, counts)  # partners of each edge, itself included
    first = torch.repeat_interleave(torch.arange(len(edges), device=edges.device), per_edge)
    begin = torch.repeat_interleave(starts, counts)
    offsets = torch.arange(len(first), device=edges.device) - torch.repeat_interleave(
        torch.cumsum(per_edge, 0) - per_edge, per_edge
    )
    second = torch.repeat_interleave(begin, per_edge) + offsets
    keep = first != second
    return edges[first[keep]], edges[second[keep]]
