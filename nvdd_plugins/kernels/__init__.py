"""Opaque compute kernels registered as torch custom ops (the framework cannot look inside)."""

from __future__ import annotations

from nvdd_plugins.kernels.lennard_jones import lennard_jones

__all__ = ["lennard_jones"]
