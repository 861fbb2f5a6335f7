"""Exceptions users see when a model or input breaks a distribution rule, and the mark of an
exception every rank raised alike."""

from __future__ import annotations

from typing import TypeVar

__all__ = ["DistributionRuleError", "is_raised_on_every_rank", "raised_on_every_rank"]

_Error = TypeVar("_Error", bound=BaseException)
_EVERY_RANK = "nvdd_raised_on_every_rank"


class DistributionRuleError(ValueError):
    """A wrapper broke one of the halo rules; the message names the rule and the fix."""


def raised_on_every_rank(error: _Error) -> _Error:
    """Mark `error` as raised alike on every rank after a collective decision (the ranks are
    still in step, so a script may catch it and carry on); returns it."""
    setattr(error, _EVERY_RANK, True)
    return error


def is_raised_on_every_rank(error: BaseException) -> bool:
    """Whether `error` was marked by `raised_on_every_rank`."""
    return bool(getattr(error, _EVERY_RANK, False))
