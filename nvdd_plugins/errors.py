"""Exceptions users see when a model or input breaks a distribution rule."""

from __future__ import annotations

__all__ = ["DistributionRuleError"]


class DistributionRuleError(ValueError):
    """A wrapper broke one of the halo rules; the message names the rule and the fix."""
