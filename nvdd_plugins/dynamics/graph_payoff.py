"""Whether replaying captured steps pays, measured as the steps run.

A captured graph costs its capture: eager warm-up steps at the view's fixed shapes, kept
nowhere, and the recording. Each step it replays saves an eager step minus the replay. The
eager step is the fastest warm-up seen: the first warm-up of a capture also pays one-off
costs (memory the step's stream allocates afresh after a capture emptied the allocator's
cache, kernels tuning themselves to new shapes), so the first capture times a second one. On a
small system a step is bound by kernel launches and a replay saves most of it; on a large
one the kernels themselves bind and a replay saves nearly nothing, so a capture at every
rebuild only adds time. `cuda_graphs="auto"` keeps capturing while the graphs so far have
saved at least what they cost (docs/cuda_graphs.md).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GraphPayoff"]


@dataclass
class GraphPayoff:
    """Wall seconds the captures so far cost (`spent`) and their replays saved (`saved`).

    Attributes:
        spent: seconds of captures (warm-up steps and recording).
        eager_step: seconds of the fastest warm-up step, the eager step a replay stands for.
        captures: graphs captured so far.
        kept: steps their replays kept.
        replaying: seconds spent replaying.
    """

    spent: float = 0.0
    eager_step: float = 0.0
    captures: int = 0
    kept: int = 0
    replaying: float = 0.0

    def captured(self, eager_step: float, seconds: float) -> None:
        """A capture took `seconds`, and a warm-up step in it `eager_step`."""
        self.eager_step = min(self.eager_step, eager_step) if self.captures else eager_step
        self.spent += seconds
        self.captures += 1

    def replayed(self, kept: int, seconds: float) -> None:
        """Replays that kept `kept` steps took `seconds`."""
        self.kept += kept
        self.replaying += seconds

    @property
    def saved(self) -> float:
        """Seconds the kept replays saved against eager steps at the same shapes."""
        return self.kept * self.eager_step - self.replaying

    @property
    def replayed_step(self) -> float | None:
        """Mean wall seconds per kept replayed step (None before any)."""
        return self.replaying / self.kept if self.kept else None

    def pays(self) -> bool:
        """Whether the replays so far saved at least what their captures cost."""
        return self.saved >= self.spent

    def __str__(self) -> str:
        return (
            f"{self.captures} captures cost {self.spent:.3f} s, their replays saved "
            f"{self.saved:.3f} s (eager step {1e3 * self.eager_step:.1f} ms)"
        )
