"""`DomainPipeline`: stages over a 2-D (pipeline, domain) mesh, each stage domain-decomposed.

Ranks form a grid of `n_stages` × `domain_size`. Each stage (e.g. a FIRE relaxation, then
NVT) runs its own integrator under `DomainParallel` over its row of ranks; systems pass from
stage to stage like items on an assembly line, so while stage 1 runs system k, stage 0
already works on system k + 1. A system moves between stages whole (gathered on the
stage's domain rank 0, handed to the next stage's domain rank 0, partitioned there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nvdd_plugins.comm import Communicator, TorchDistCommunicator
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics import BaseDynamics, Hook
from nvdd_plugins.parallel.domain_parallel import DomainParallel

__all__ = ["DistributedPipeline", "DomainPipeline", "PipelineMesh", "Stage"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PipelineMesh:
    """This rank's place in a (pipeline, domain) mesh.

    `domain`: the ranks of this rank's stage (what `DomainParallel` decomposes over);
    `pipeline`: the ranks of the same domain index in every stage (systems travel along it);
    `stage`: this rank's stage index.
    """

    domain: Communicator
    pipeline: Communicator
    stage: int
    ndim = 2  # a 2-D mesh: refused where one decomposition group is expected
    mesh_dim_names = ("pipeline", "domain")

    @classmethod
    def from_device_mesh(cls, mesh: Any) -> PipelineMesh:
        """From a torch `DeviceMesh` with dimensions named "pipeline" and "domain" (e.g.
        `init_device_mesh("cpu", (2, 2), mesh_dim_names=("pipeline", "domain"))`)."""
        names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
        if getattr(mesh, "ndim", None) != 2 or set(names) != {"pipeline", "domain"}:
            raise ValueError(
                "DomainPipeline needs a 2-D DeviceMesh with mesh_dim_names=('pipeline', "
                f"'domain'), got ndim={getattr(mesh, 'ndim', None)} and names {names}"
            )
        return cls(
            domain=TorchDistCommunicator(mesh["domain"].get_group()),
            pipeline=TorchDistCommunicator(mesh["pipeline"].get_group()),
            stage=mesh.get_local_rank("pipeline"),
        )


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: `dynamics()` builds a fresh integrator for each system (its state
    never leaks from one system to the next), run for at most `n_steps` (an optimizer stops
    at convergence); `hooks` go on the stage's `DomainParallel`."""

    dynamics: Callable[[], BaseDynamics]
    n_steps: int
    hooks: Sequence[Hook] = ()
    name: str = ""


class DomainPipeline:
    """Run `stages` one after the other on every system, each stage domain-decomposed over
    its row of the mesh.

    Args:
        stages: one `Stage` per row of the mesh (stage i runs on pipeline index i).
        mesh: this rank's `PipelineMesh`.
        cutoff: the models' cutoff, Å; skin: Verlet skin, Å (each stage's `DomainConfig`).
        config: further `DomainConfig` keywords.
    """

    def __init__(
        self,
        stages: Sequence[Stage],
        mesh: PipelineMesh,
        cutoff: float,
        skin: float = 0.5,
        **config: Any,
    ) -> None:
        if len(stages) != mesh.pipeline.size:
            raise ValueError(
                f"{len(stages)} stages on a mesh with {mesh.pipeline.size} pipeline ranks: "
                "one stage per row of the (pipeline, domain) mesh"
            )
        self.stages = list(stages)
        self.mesh = mesh
        self.config = DomainConfig(cutoff=cutoff, skin=skin, mesh=mesh.domain, **config)
        self.stage = self.stages[mesh.stage]
        self.records: list[dict[str, Any]] = []  # per system this stage ran: steps, converged

    @property
    def is_stage_root(self) -> bool:
        """Whether this rank is its stage's domain rank 0 (it holds whole systems)."""
        return self.mesh.domain.rank == 0

    def run(self, systems: Sequence[Batch] | None = None) -> list[Batch]:
        """Pass every system through every stage (collective over the whole mesh).

        `systems`: the full systems, on stage 0's domain rank 0 (ignored elsewhere; every
        rank learns their number). Returns the finished systems, in order, on the last
        stage's domain rank 0 ([] elsewhere).
        """
        count = len(systems or ()) if self.mesh.stage == 0 and self.is_stage_root else 0
        if self.is_stage_root:
            count = int(self.mesh.pipeline.broadcast_object(count, src=0))
        count = int(self.mesh.domain.broadcast_object(count, src=0))
        queue = list(systems or ()) if self.mesh.stage == 0 else []
        stage, last = self.mesh.stage, len(self.stages) - 1
        finished: list[Batch] = []
        outgoing: Batch | None = None
        for tick in range(count + last):
            incoming = self._hand_over(outgoing, queue, tick)
            outgoing = None
            if 0 <= tick - stage < count:
                result = self._run_stage(incoming)
                if stage == last:
                    finished += [result] if result is not None else []
                else:
                    outgoing = result
        return finished

    def _hand_over(self, outgoing: Batch | None, queue: list[Batch], tick: int) -> Batch | None:
        """Each stage root passes what it finished to the next stage's root; stage 0 takes
        its next input. Returns this rank's input for `tick` (None off the stage roots)."""
        if not self.is_stage_root:
            return None
        stage = self.mesh.stage
        incoming = queue[tick] if stage == 0 and tick < len(queue) else None
        for sender in range(len(self.stages) - 1):
            received = self.mesh.pipeline.broadcast_object(
                outgoing if stage == sender else None, src=sender
            )
            if stage == sender + 1:
                incoming = received
        return incoming

    def _run_stage(self, full: Batch | None) -> Batch | None:
        """This stage on one system: partition, run, gather (the full system on the root)."""
        dynamics = self.stage.dynamics()
        with DomainParallel(dynamics, self.config, self.stage.n_steps, self.stage.hooks) as dd:
            dd.partition(full if self.is_stage_root else None)
            owned = dd.run()
            converged = dd.converged(owned)
            gathered = dd.gather(owned, dst=0)  # the stage root (domain rank 0) keeps it
        self.records.append({"steps": dynamics.step_count, "converged": converged})
        logger.info("stage %d: %d steps", self.mesh.stage, dynamics.step_count)
        if not self.is_stage_root:
            return None
        if self.mesh.stage < len(self.stages) - 1:
            for name in dynamics.compute_properties:  # the next stage evaluates its model
                if name in gathered:
                    gathered.pop(name)
        return gathered.to("cpu")


DistributedPipeline = DomainPipeline
"""nvalchemi's name of `DomainPipeline`."""
