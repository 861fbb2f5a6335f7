"""Data layer: `AtomicData` (one system) and `Batch` (systems concatenated along atoms)."""

from __future__ import annotations

from nvdd_plugins.data.atomic_data import AtomicData
from nvdd_plugins.data.batch import Batch
from nvdd_plugins.data.fields import FieldLevel

__all__ = ["AtomicData", "Batch", "FieldLevel"]
