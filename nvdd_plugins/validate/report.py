"""`ValidationReport`: what `trace_and_validate` found, readable as text."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nvdd_plugins.spec import MLIPSpec
from nvdd_plugins.validate.recording import Handling, OpRecord

__all__ = ["ValidationReport"]

_UNITS = {"energy": "eV/atom", "energies": "eV", "forces": "eV/Å", "stress": "eV/Å³"}


@dataclass(frozen=True)
class ValidationReport:
    """The result of validating a model wrapper under domain decomposition.

    Attributes:
        ok: the distributed run equals the single-process one and no rule is broken.
        next_action: the exact change to make (None when ok).
        problem: what was found (None when ok).
        spec: a spec verified to work: the model's own when ok, the fixed one when the fix
            is in the spec (an adapter), else None.
        errors: per output, the largest deviation of the distributed run (under the
            model's own spec) from the single-process one: "energy" (eV/atom), "energies"
            (eV), "forces" (eV/Å), "stress" (eV/Å³); empty when a rule stopped the run.
        tolerances: the bound each error was held to.
        ops: every op the distributed forward called on per-atom tensors, with the place
            in the model's code and how the engine handles it.
        setting: ranks, device, precision and sample size, in words.
        notes: what else to know (checks skipped, precision).
    """

    ok: bool
    next_action: str | None
    problem: str | None
    spec: MLIPSpec | None
    errors: Mapping[str, float]
    tolerances: Mapping[str, float]
    ops: tuple[OpRecord, ...]
    setting: str
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = [f"trace_and_validate: {'OK' if self.ok else 'NOT OK'} ({self.setting})"]
        for name, tolerance in self.tolerances.items():
            error = self.errors.get(name)
            shown = "not compared" if error is None else f"{error:.1e}"
            mark = "" if error is None or error <= tolerance else "   <-- too large"
            lines.append(
                f"  {name:<9} {shown:>12} {_UNITS[name]:<8} (tolerance {tolerance:.0e}){mark}"
            )
        handled = [r for r in self.ops if r.handling is not Handling.PER_ROW]
        per_row = sum(r.calls for r in self.ops if r.handling is Handling.PER_ROW)
        lines.append("ops on per-atom tensors:")
        for record in handled:
            lines.append(f"  {record.op} at {record.site} x{record.calls}: {record.handling.value}")
        lines.append(f"  and {per_row} per-row or gather calls")
        if self.problem:
            lines.append(f"problem: {self.problem}")
        if self.next_action:
            lines.append(f"next action: {self.next_action}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)
