"""`trace_and_validate`: run a model wrapper on a simulated mesh, compare it with the
single-process run, and say what to change when they differ."""

from __future__ import annotations

import torch
from ase import Atoms

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.models import BaseModelMixin
from nvdd_plugins.validate.diagnose import Finding, diagnose
from nvdd_plugins.validate.inputs import in_precision, sample_atoms
from nvdd_plugins.validate.report import ValidationReport
from nvdd_plugins.validate.trial import Trial

__all__ = ["trace_and_validate"]


def trace_and_validate(
    model: BaseModelMixin,
    sample: Atoms | Batch | None = None,
    world_size: int = 2,
    strategy: StrategyKind | str = StrategyKind.HALO,
    device: torch.device | str = "cpu",
    skin: float = 0.5,
) -> ValidationReport:
    """Validate `model` under domain decomposition on `world_size` simulated ranks.

    The model (a copy, in float64 where it converts) runs on `sample` (default: a few
    hundred atoms of a sheared periodic fcc crystal scaled to the model's cutoff, of argon or
    else an element the model has parameters for) in one
    process and distributed, recording every op on per-atom tensors; energy, per-atom
    energies, forces and stress are compared. When the model can run with compile=True,
    its checked first forward runs too, so an in-place scatter whose result is not rebound
    shows. A broken rule or a difference becomes a not-ok report with the exact fix
    (`next_action`) and, when the fix is an adapter, the spec with it, verified.

    Args:
        model: a `BaseModelMixin` wrapper.
        sample: one system (`ase.Atoms` or a one-system `Batch`); its species must suit
            the model.
        world_size: simulated ranks (threads).
        strategy: the `StrategyKind` to validate; one the engine does not offer raises.
        device: "cpu" or a CUDA device.
        skin: Verlet skin, Å.
    """
    device = torch.device(device)
    strategy = StrategyKind(strategy)
    spec = model.distribution_spec(strategy)
    candidate, dtype, precision_note = in_precision(model, device)
    atoms = sample_atoms(sample, candidate, skin)
    setting = (
        f"{world_size} simulated rank(s), {device}, {str(dtype).removeprefix('torch.')}, "
        f"{len(atoms)} atoms, {strategy.value}"
    )
    if spec is None:
        finding = Finding(
            f"{type(model).__name__}.distribution_spec({strategy}) returned None",
            "return SPEC_MPNN_HALO (autograd/scatter models) or an MLIPSpec from distribution_spec",
        )
        return ValidationReport(
            False, finding.next_action, finding.problem, None, {}, {}, (), setting
        )
    trial = Trial(candidate, atoms, world_size, strategy, device, dtype, skin)
    notes = [precision_note] if precision_note else []
    outcome = trial.distributed(spec)
    finding = diagnose(trial, outcome)
    ops = outcome.log.records()
    if finding is None:
        ready = trial.compile_ready()
        if isinstance(ready, str):
            notes.append(f"compile=True rules not checked: {ready}")
        else:
            compiled = trial.distributed(spec, compiled=ready)
            finding = diagnose(trial, compiled)
            ops = ops if finding is None else compiled.log.records()
    return ValidationReport(
        ok=finding is None,
        next_action=None if finding is None else finding.next_action,
        problem=None if finding is None else finding.problem,
        spec=spec if finding is None else finding.spec,
        errors=outcome.deviations,
        tolerances=trial.tolerances,
        ops=ops,
        setting=setting,
        notes=tuple(notes),
    )
