"""From a failed distributed run to the defect behind it and the exact fix.

A broken rule the engine raised is named by its message; wrong numbers are traced to a
model that weighs pairs beyond its cutoff although it says it does not, to a model that
ignores periodic images (its single-process energy changes when the system is
translated and wrapped), to opaque ops no adapter covers (fixed by trying adapters until
the numbers agree, so the suggested spec is one that was verified) or to reductions over
the atoms that each rank makes over its own rows only.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from nvdd_plugins.distributed_model import REBIND_RULE, SENTINEL_RULE
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.spec import GLOBAL_SUM_ADAPTERS, MLIPSpec, OpAdapter, ScatterOutputs
from nvdd_plugins.validate.recording import Handling, OpRecord, RecordLog, user_site_of
from nvdd_plugins.validate.trial import Outcome, Trial

__all__ = ["Finding", "diagnose"]

PRE_SLICED = "return per-atom energies over all rows, not owned rows"
SENTINELS = (
    "filter sentinel edges in adapt_input: valid = (edge_index[0] < n) & (edge_index[1] < n) "
    "(BaseModelMixin.adapt_input does it)"
)
MINIMUM_IMAGE = (
    "compute pair vectors with the minimum image from the cell: "
    "rij = minimum_image(positions[j] - positions[i], cell[0], pbc[0]) "
    "(nvdd_plugins.geometry), or add the neighbour list's shifts: "
    "rij = positions[j] - positions[i] + shifts"
)
GLOBAL_SUM = (
    "sum the owned rows into a per-system tensor (s = x.new_zeros(n_systems, ...)"
    ".index_add_(0, batch_idx, x): nvdd keeps the owned rows of such a sum), pass it through "
    "summed_over_ranks (nvdd_plugins.ops) and add OpAdapter(op=summed_over_ranks, "
    "output_transforms={0: AllReduceSum()}) to the spec's DistributionSpec(custom_ops=...)"
)
_TRANSLATION = (0.5, 0.37, 0.29)  # fractional translation of the periodicity probe


@dataclass(frozen=True)
class Finding:
    """A defect and its fix.

    Attributes:
        problem: what was found.
        next_action: the exact change to make.
        spec: a spec with the fix that was verified to work, when the fix is in the spec.
    """

    problem: str
    next_action: str
    spec: MLIPSpec | None = None


def diagnose(trial: Trial, outcome: Outcome) -> Finding | None:
    """None when `outcome` agrees with the single-process run and no op went unhandled;
    else the defect and its fix."""
    if outcome.error is not None:
        return _rule_finding(outcome.error, outcome.log)
    unknown = _unknown_ops(outcome.log.records())
    if trial.agrees(outcome.deviations) and not unknown:
        return None
    return (
        _skin_pair_finding(trial, outcome)
        or _global_sum_finding(trial, outcome)
        or _periodicity_finding(trial)
        or (_adapter_finding(trial, outcome.spec, unknown) if unknown else None)
        or _reduction_finding(outcome)
        or _mismatch_finding(outcome)
    )


# -- rules the engine raised -----------------------------------------------------------------
def _rebind_action(error: DistributionRuleError, log: RecordLog) -> str:
    stale = log.stale_read
    if stale is None:
        return REBIND_RULE
    where = f" at {stale.reader_site}" if stale.reader_site else ""
    return (
        f"rebind the result of {stale.op} at {stale.site} (x = x.{stale.op}(...)): "
        f"{stale.reader}{where} reads the old tensor, which compile=True leaves without "
        "its halo refresh"
    )


def _sentinel_action(error: DistributionRuleError, log: RecordLog) -> str:
    site = user_site_of(error.__cause__ or error)
    return SENTINELS + (f"; {site} indexes with them" if site else "")


_RULES: tuple[tuple[str, Callable[[DistributionRuleError, RecordLog], str]], ...] = (
    ("stale tensor", _rebind_action),
    (SENTINEL_RULE, _sentinel_action),
    ("do not pre-slice", lambda error, log: PRE_SLICED),
)


def _rule_finding(error: DistributionRuleError, log: RecordLog) -> Finding:
    message = str(error)
    for marker, action in _RULES:
        if marker in message:
            return Finding(message, action(error, log))
    return Finding(message, message)


# -- wrong numbers ---------------------------------------------------------------------------
def _with_adapters(spec: MLIPSpec, added: tuple[OpAdapter, ...]) -> MLIPSpec:
    distribution = spec.distribution
    custom_ops = distribution.custom_ops + added
    return dataclasses.replace(
        spec, distribution=dataclasses.replace(distribution, custom_ops=custom_ops)
    )


def _skin_pair_finding(trial: Trial, outcome: Outcome) -> Finding | None:
    """A model declaring that it weighs pairs beyond its cutoff zero
    (`NeighborConfig(accepts_skin_pairs=True)`: the Verlet list's skin pairs reach it
    unfiltered) whose distributed run agrees once that claim is dropped: the claim is
    wrong, not the model's reductions or aggregations."""
    neighbors = trial.model.model_config.neighbor_config
    claimed = neighbors is not None and neighbors.accepts_skin_pairs and trial.skin > 0
    if not claimed or trial.agrees(outcome.deviations):
        return None
    filtered = copy.copy(trial.model)  # the same weights, the pairs filtered to the cutoff
    filtered.model_config = dataclasses.replace(
        trial.model.model_config,
        neighbor_config=dataclasses.replace(
            neighbors, accepts_skin_pairs=False, prune_skin_pairs=False
        ),
    )
    retried = trial.distributed(outcome.spec, model=filtered)
    if retried.error is not None or not trial.agrees(retried.deviations):
        return None
    return Finding(
        "the model declares NeighborConfig(accepts_skin_pairs=True) (pairs at r >= cutoff "
        f"weigh exactly zero) but weighs the Verlet list's pairs beyond its {trial.model.cutoff}"
        f" Å cutoff: with the skin pairs the distributed results differ ({_worst(outcome)}), "
        "with the pairs filtered to the cutoff they agree",
        "set NeighborConfig(accepts_skin_pairs=False) (the default: nvdd then filters the "
        "pairs to the cutoff), or give every pair at r >= cutoff exactly zero weight (e.g. "
        "multiply its weight by (r < cutoff))",
    )


def _global_sum_finding(trial: Trial, outcome: Outcome) -> Finding | None:
    """A spec without the adapters of the global-sum marks (`owned_part`,
    `summed_over_ranks`) whose numbers agree once they are added: each rank summed its own
    rows only."""
    covered = {adapter.op for adapter in outcome.spec.distribution.custom_ops}
    missing = tuple(a for a in GLOBAL_SUM_ADAPTERS if a.op not in covered)
    called = {record.target for record in outcome.log.records()}
    if not any(adapter.op in called for adapter in missing):
        return None
    fixed = _with_adapters(outcome.spec, missing)
    retried = trial.distributed(fixed)
    if retried.error is not None or not trial.agrees(retried.deviations):
        return None
    names = ", ".join(adapter.op.__name__ for adapter in missing)
    return Finding(
        f"the model's global sums pass through {names}, which no adapter in the spec "
        "distributes: each rank summed over its own rows instead of the whole system",
        "add GLOBAL_SUM_ADAPTERS (nvdd_plugins.spec) to the spec's "
        "DistributionSpec(custom_ops=...)",
        fixed,
    )


def _periodicity_finding(trial: Trial) -> Finding | None:
    """The model's single-process energy must not change when every atom is translated and
    wrapped back into the cell; a model that ignores periodic images fails this."""
    if not trial.atoms.pbc.any():
        return None
    moved = trial.atoms.copy()
    moved.translate(moved.cell.cartesian_positions(_TRANSLATION))
    moved.wrap()
    energy = trial.single_process(moved)["energy"]
    change = float((energy - trial.reference["energy"]).abs().max()) / len(moved)
    if change <= trial.tolerances["energy"]:
        return None
    return Finding(
        f"the single-process energy changes by {change:.1e} eV/atom when the system is "
        "translated and wrapped back into the cell: pair vectors ignore periodic images "
        "(under decomposition ghosts sit at their images, so the two runs disagree)",
        MINIMUM_IMAGE,
    )


def _unknown_ops(records: tuple[OpRecord, ...]) -> dict[str, tuple[object, bool]]:
    """Opaque ops no adapter covers: name -> (op, writes per-atom rows), first call first."""
    unknown: dict[str, tuple[object, bool]] = {}
    for record in records:
        if record.handling is Handling.UNKNOWN_OPAQUE:
            _, writes = unknown.get(record.op, (None, False))
            unknown[record.op] = (record.target, writes or record.writes_rows)
    return unknown


def _adapter(op: object, scatter: bool) -> OpAdapter:
    return OpAdapter(op=op, output_transforms={0: ScatterOutputs()} if scatter else {})


def _adapter_line(name: str, scatter: bool) -> str:
    transforms = ", output_transforms={0: ScatterOutputs()}" if scatter else ""
    return f"OpAdapter(op={name}{transforms})"


def _adapter_finding(
    trial: Trial, spec: MLIPSpec, unknown: dict[str, tuple[object, bool]]
) -> Finding | None:
    """Adapters for the unknown ops, verified: ScatterOutputs on every op that writes
    per-atom rows, then each dropped where the numbers agree without it."""
    scatter = {name: writes for name, (_, writes) in unknown.items()}

    def fixed(choice: dict[str, bool]) -> MLIPSpec:
        added = tuple(_adapter(unknown[name][0], s) for name, s in choice.items())
        return _with_adapters(spec, added)

    def works(choice: dict[str, bool]) -> bool:
        outcome = trial.distributed(fixed(choice))
        return outcome.error is None and trial.agrees(outcome.deviations)

    names = ", ".join(unknown)
    if not works(scatter):
        return None
    for name in [n for n, s in scatter.items() if s]:
        lighter = {**scatter, name: False}
        if works(lighter):
            scatter = lighter
    lines = ", ".join(_adapter_line(name, s) for name, s in scatter.items())
    return Finding(
        f"the opaque op(s) {names} read or write per-atom rows and no OpAdapter in the spec "
        "covers them: nvdd cannot see whether they aggregate over edges (then their ghost "
        "rows are wrong) or work row by row",
        f"add {lines} to the spec's DistributionSpec(custom_ops=...)",
        fixed(scatter),
    )


def _reduction_finding(outcome: Outcome) -> Finding | None:
    """Reductions over the atoms: each rank reduces its own rows, owned and ghost."""
    found = [r for r in outcome.log.records() if r.handling is Handling.ATOM_REDUCTION]
    if not found:
        return None
    sites = ", ".join(f"{r.op} at {r.site}" for r in found)
    return Finding(
        f"the distributed results differ from the single-process run ({_worst(outcome)}) "
        f"and the model reduces per-atom tensors over the atoms ({sites}): on each rank "
        "that reduces the rank's own rows, owned and ghost, not the system's",
        f"make the {found[0].op} over the atoms at {found[0].site} a sum over the whole "
        f"system: {GLOBAL_SUM}",
    )


def _worst(outcome: Outcome) -> str:
    return ", ".join(f"{name} {value:.1e}" for name, value in outcome.deviations.items())


def _mismatch_finding(outcome: Outcome) -> Finding:
    ops = sorted({r.op for r in outcome.log.records() if r.handling is not Handling.PER_ROW})
    return Finding(
        f"the distributed results differ from the single-process run ({_worst(outcome)}) and no "
        "broken rule was seen",
        "check that every aggregation onto atoms is a torch scatter/index op, an op with an "
        "OpAdapter or passes through scattered_onto_nodes (recorded: "
        f"{', '.join(ops) or 'none'}), and that per-atom outputs the model differentiates "
        "itself are listed in MLIPSpec(gradient_outputs=...)",
    )
