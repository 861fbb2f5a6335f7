"""`Trial`: a model and its sample, the single-process reference, and distributed runs of
the model under a given spec on a simulated mesh, each compared with the reference."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from ase import Atoms

from nvdd_plugins.comm import SimulatedCommunicator, run_simulated
from nvdd_plugins.config import DomainConfig, StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model import ReplicatedModel, require_compilable
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.models import BaseModelMixin, evaluate_model
from nvdd_plugins.spec import MLIPSpec
from nvdd_plugins.validate.inputs import TOLERANCES, properties_for
from nvdd_plugins.validate.recording import RecordedModel, RecordLog

__all__ = ["Outcome", "Trial", "rule_error"]

_RANK_TIMEOUT_S = 300.0


def rule_error(error: BaseException) -> DistributionRuleError | None:
    """The `DistributionRuleError` behind `error` (a simulated rank's failure wraps it)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, DistributionRuleError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


@dataclass(frozen=True)
class Outcome:
    """One distributed run under `spec`.

    Attributes:
        spec: the spec the model ran under.
        compiled: run with compile=True's semantics (its first, checked forward is eager).
        log: the ops the forward called on per-atom tensors.
        deviations: per output, the largest deviation from the single-process run ("energy"
            per atom); empty when the run broke a rule.
        error: the rule the run broke, or None.
    """

    spec: MLIPSpec
    compiled: bool
    log: RecordLog
    deviations: dict[str, float]
    error: DistributionRuleError | None


class Trial:
    """Runs `model` on `atoms` single-process and on `world_size` simulated ranks.

    Args:
        model: the wrapper, already in the validation precision and on `device`.
        atoms: the sample system.
        world_size: simulated ranks.
        strategy: passed to `DomainConfig`.
        device: where the model and the atoms live.
        dtype: floating precision of positions and cell.
        skin: Verlet skin, Å (a skin > 0 hands a model without `accepts_skin_pairs`
            sentinel edges, so an unfiltered neighbour list shows).
    """

    def __init__(
        self,
        model: BaseModelMixin,
        atoms: Atoms,
        world_size: int,
        strategy: StrategyKind,
        device: torch.device,
        dtype: torch.dtype,
        skin: float,
    ) -> None:
        self.model = model
        self.atoms = atoms
        self.world_size = world_size
        self.strategy = strategy
        self.device = device
        self.dtype = dtype
        self.skin = skin
        self.properties = properties_for(model, atoms)
        self.reference = self.single_process(atoms)
        self.tolerances = {
            name: tolerance * max(1.0, self._magnitude(name))
            for name, tolerance in TOLERANCES[dtype].items()
            if name in self.reference
        }

    def batch(self, atoms: Atoms) -> Batch:
        """`atoms` as a batch in the trial's precision and device."""
        return Batch.from_atoms(atoms, device=self.device, dtype=self.dtype)

    def single_process(self, atoms: Atoms) -> dict[str, torch.Tensor]:
        """The model on `atoms` in one process (the reference)."""
        result = evaluate_model(self.model, self.batch(atoms), self.properties)
        return {k: v.cpu() for k, v in result.items()}

    def _magnitude(self, name: str) -> float:
        value = float(self.reference[name].abs().max()) if self.reference[name].numel() else 0.0
        return value / len(self.atoms) if name == "energy" else value

    def deviations(self, result: dict[str, torch.Tensor]) -> dict[str, float]:
        """Largest deviation of each output from the reference ("energy" per atom)."""
        out = {}
        for name in self.tolerances:
            if name in result:
                worst = float((result[name].cpu() - self.reference[name]).abs().max())
                out[name] = worst / len(self.atoms) if name == "energy" else worst
        return out

    def agrees(self, deviations: dict[str, float]) -> bool:
        """Every output within its tolerance (an output missing counts as wrong)."""
        return all(
            deviations.get(name, float("inf")) <= tol for name, tol in self.tolerances.items()
        )

    def compile_ready(self) -> BaseModelMixin | str:
        """The model prepared for compile=True (`prepare_for_compile`), or why compile=True
        cannot run on this sample. Prepared here, before any rank thread starts, since a
        preparation may patch process-wide state (mace's patches torch.nn.Module.__call__)."""
        if self.strategy is StrategyKind.GRAPH_PARTITION:
            return "graph partition runs eagerly"
        config = DomainConfig(cutoff=self.model.cutoff, skin=self.skin, compile=True)
        cell = torch.as_tensor(self.atoms.cell.array, dtype=torch.float64)
        try:
            require_compilable(self.model, config, cell, torch.as_tensor(self.atoms.pbc))
            return self.model.prepare_for_compile()
        except ValueError as err:  # the model or the sample cannot run compiled
            return str(err)

    def distributed(
        self,
        spec: MLIPSpec,
        compiled: BaseModelMixin | None = None,
        model: BaseModelMixin | None = None,
    ) -> Outcome:
        """The model under `spec` on the simulated mesh, compared with the reference.

        `compiled`: the `compile_ready` model, run with DomainConfig(compile=True), of which
        one evaluation runs only the eager, checked first forward (functional halo
        refreshes: unrebound scatters show). `model`: a variant of the model to run instead
        (the same weights, another declaration).
        """
        log = RecordLog()
        run = next(m for m in (compiled, model, self.model) if m is not None)
        recorded = RecordedModel(run, spec, log)

        def rank(comm: SimulatedCommunicator) -> dict[str, torch.Tensor]:
            config = DomainConfig(
                cutoff=self.model.cutoff,
                skin=self.skin,
                mesh=comm,
                strategy=self.strategy,
                compile=compiled is not None,
            )
            distributed = ReplicatedModel(recorded, config)
            return distributed(self.batch(self.atoms), self.properties)

        try:
            result = run_simulated(self.world_size, rank, timeout=_RANK_TIMEOUT_S)[0]
        except Exception as err:
            broken = rule_error(err)
            if broken is None:
                raise
            return Outcome(spec, compiled is not None, log, {}, broken)
        return Outcome(spec, compiled is not None, log, self.deviations(result), None)
