"""Validate a model wrapper under domain decomposition: `trace_and_validate` runs it on a
simulated mesh, compares it with the single-process run, records what it did with per-atom
tensors and says what to change (`python -m nvdd_plugins.validate module:Wrapper`)."""

from __future__ import annotations

from nvdd_plugins.validate.recording import Handling, OpRecord
from nvdd_plugins.validate.report import ValidationReport
from nvdd_plugins.validate.trace import trace_and_validate

__all__ = ["Handling", "OpRecord", "ValidationReport", "trace_and_validate"]
