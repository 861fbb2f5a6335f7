"""`MLIPSpec`: what a model declares so the framework can distribute it; versioned JSON I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nvdd_plugins.spec.adapters import (
    JitAdapter,
    MethodAdapter,
    OpAdapter,
    PythonAdapter,
    adapter_from_dict,
)
from nvdd_plugins.spec.kinds import OutputKind
from nvdd_plugins.spec.policies import HaloStoragePolicy, StoragePolicy, policy_from_name

__all__ = ["SPEC_FORMAT", "SPEC_VERSION", "DistributionSpec", "MLIPSpec"]

SPEC_FORMAT = "nvdd.MLIPSpec"
SPEC_VERSION = 1


@dataclass(frozen=True)
class DistributionSpec:
    """How the model's forward is distributed.

    Args:
        policy: storage layout (`HaloStoragePolicy` or `GraphParallelPolicy`).
        custom_ops: one `OpAdapter` per opaque op the model calls.
        third_party_helpers: `MethodAdapter` / `PythonAdapter` / `JitAdapter` replacements
            applied while the distributed forward runs.
        aggregations_marked: every aggregation onto atoms whose ghost rows matter passes
            through `scattered_onto_nodes` (directly or in a helper adapter), and per-atom
            energies do not depend on per-system sums. Eager forwards then run without op
            interception, whose per-op Python cost dominates small systems; the claim is
            checked once against an intercepted forward.
        edge_target_row: the row of `edge_index` onto which every per-edge -> per-atom
            aggregation writes (MACE: 1, its receivers), when there is one. An edge whose
            target is a ghost row then only feeds that ghost row, which the halo refresh
            overwrites, so eager forwards drop such edges (half of the edges that cross a
            sub-domain face); the claim is checked once against a forward with every edge.
    """

    policy: StoragePolicy = field(default_factory=HaloStoragePolicy)
    custom_ops: tuple[OpAdapter, ...] = ()
    third_party_helpers: tuple[MethodAdapter | PythonAdapter | JitAdapter, ...] = ()
    aggregations_marked: bool = False
    edge_target_row: int | None = None

    def __post_init__(self) -> None:
        if self.edge_target_row not in (None, 0, 1):
            raise ValueError(f"edge_target_row must be 0, 1 or None, got {self.edge_target_row!r}")
        object.__setattr__(self, "custom_ops", tuple(self.custom_ops))
        object.__setattr__(self, "third_party_helpers", tuple(self.third_party_helpers))
        for adapter in self.custom_ops:
            if not isinstance(adapter, OpAdapter):
                raise TypeError(f"custom_ops takes OpAdapter, got {adapter!r}")
        for adapter in self.third_party_helpers:
            if not isinstance(adapter, MethodAdapter | PythonAdapter | JitAdapter):
                raise TypeError(
                    f"third_party_helpers takes Method/Python/JitAdapter, got {adapter!r}"
                )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "policy": self.policy.name,
            "custom_ops": [a.to_dict() for a in self.custom_ops],
            "third_party_helpers": [a.to_dict() for a in self.third_party_helpers],
            "aggregations_marked": self.aggregations_marked,
            "edge_target_row": self.edge_target_row,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DistributionSpec:
        """Inverse of `to_dict`."""
        return cls(
            policy=policy_from_name(data["policy"]),
            custom_ops=tuple(adapter_from_dict(a) for a in data.get("custom_ops", ())),
            third_party_helpers=tuple(
                adapter_from_dict(a) for a in data.get("third_party_helpers", ())
            ),
            aggregations_marked=bool(data.get("aggregations_marked", False)),
            edge_target_row=data.get("edge_target_row"),
        )


@dataclass(frozen=True)
class MLIPSpec:
    """A model's distribution contract.

    Args:
        distribution: the `DistributionSpec`.
        output_kinds: output name -> `OutputKind`; "energies" and "forces" are PER_NODE
            (added when not listed).
        gradient_outputs: PER_NODE outputs the model computes itself as gradients over the
            local positions (e.g. forces from its own autograd call); their ghost rows hold
            real contributions and are summed into the owners before owned rows are kept.
        n_layers: message-passing layers (1 for a pair potential), when fixed: a front end
            without per-layer exchange (LAMMPS without the handle) then knows it needs a
            ghost shell of n_layers cutoffs; None: unknown.
    """

    distribution: DistributionSpec = field(default_factory=DistributionSpec)
    output_kinds: Mapping[str, OutputKind] = field(default_factory=dict)
    gradient_outputs: frozenset[str] = frozenset()
    n_layers: int | None = None

    def __post_init__(self) -> None:
        # per-atom energies (every model returns them) and forces (autograd's or the model's)
        kinds = {"energies": OutputKind.PER_NODE, "forces": OutputKind.PER_NODE}
        kinds.update({name: OutputKind(kind) for name, kind in self.output_kinds.items()})
        object.__setattr__(self, "output_kinds", MappingProxyType(kinds))
        object.__setattr__(self, "gradient_outputs", frozenset(self.gradient_outputs))
        for name in self.gradient_outputs:
            if kinds.get(name) is not OutputKind.PER_NODE:
                raise ValueError(f"gradient output {name!r} must be declared PER_NODE")
        if self.gradient_outputs and self.distribution.aggregations_marked:
            raise ValueError(
                "gradient_outputs needs op interception (it makes the energy the model "
                "differentiates this rank's owned partial), so aggregations_marked must be False"
            )
        if self.n_layers is not None and (not isinstance(self.n_layers, int) or self.n_layers < 1):
            raise ValueError(f"n_layers must be a positive integer or None, got {self.n_layers!r}")

    def __deepcopy__(self, memo: dict[int, Any]) -> MLIPSpec:
        """The spec itself: it is immutable (so a model holding one can be deep-copied)."""
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, versioned form (ops and callables by qualified name)."""
        return {
            "format": SPEC_FORMAT,
            "version": SPEC_VERSION,
            "distribution": self.distribution.to_dict(),
            "output_kinds": {k: v.value for k, v in self.output_kinds.items()},
            "gradient_outputs": sorted(self.gradient_outputs),
            "n_layers": self.n_layers,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MLIPSpec:
        """Inverse of `to_dict`; rejects other formats and newer versions."""
        if data.get("format") != SPEC_FORMAT:
            raise ValueError(f"not an MLIPSpec document (format={data.get('format')!r})")
        version = data.get("version")
        if not isinstance(version, int) or version > SPEC_VERSION:
            raise ValueError(
                f"MLIPSpec version {version!r} is newer than this nvdd supports ({SPEC_VERSION})"
            )
        return cls(
            distribution=DistributionSpec.from_dict(data["distribution"]),
            output_kinds={k: OutputKind(v) for k, v in data["output_kinds"].items()},
            gradient_outputs=frozenset(data.get("gradient_outputs", ())),
            n_layers=data.get("n_layers"),
        )

    def save(self, path: str | PathLike[str]) -> None:
        """Write the spec as JSON."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | PathLike[str]) -> MLIPSpec:
        """Read a spec written by `save`."""
        return cls.from_dict(json.loads(Path(path).read_text()))
