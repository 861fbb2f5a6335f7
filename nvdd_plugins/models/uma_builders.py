"""Random-weight UMA models from fairchem-core's own classes, for tests, examples and
benchmarks (`UMAWrapper` wraps them), and fairchem inference checkpoints written from them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nvdd_plugins.models.seeding import seeded_weights

__all__ = ["random_uma", "save_uma_checkpoint", "uma_config"]


def uma_config(
    cutoff: float = 4.5,
    num_layers: int = 2,
    lmax: int = 2,
    channels: int = 8,
    tasks: Sequence[str] = ("omat",),
    **backbone_options: Any,
) -> dict[str, Any]:
    """A fairchem model config (the `model_config` of its checkpoints): a `HydraModel` with a
    small dense eSCN-MD backbone (`num_layers` blocks, `lmax` = `mmax`, `channels` sphere,
    hidden and edge channels, 16 Gaussian distance functions, one dataset embedding per
    task) and an `MLP_EFS_Head` (autograd forces and stress). `backbone_options` go to
    fairchem's `eSCNMDBackbone`."""
    backbone = {
        "model": "fairchem.core.models.uma.escn_md.eSCNMDBackbone",
        "cutoff": float(cutoff),
        "num_layers": num_layers,
        "lmax": lmax,
        "mmax": lmax,
        "sphere_channels": channels,
        "hidden_channels": channels,
        "edge_channels": channels,
        "num_distance_basis": 16,
        "otf_graph": True,
        "always_use_pbc": False,
        "direct_forces": False,
        "regress_forces": True,
        "regress_stress": True,
        "dataset_mapping": {task: task for task in tasks},
        **backbone_options,
    }
    head = {"module": "fairchem.core.models.uma.escn_md.MLP_EFS_Head"}
    return {
        "_target_": "fairchem.core.models.base.HydraModel",
        "backbone": backbone,
        "heads": {"efs": head},
    }


def random_uma(
    config: dict[str, Any] | None = None, seed: int = 0, dtype: torch.dtype = torch.float64
) -> nn.Module:
    """fairchem's model for `config` (default: `uma_config()`) with random weights drawn
    from `seed` only, in `dtype`, in eval mode; nothing is downloaded."""
    from hydra.utils import instantiate  # optional dependency (fairchem's own builder)

    with seeded_weights(seed):
        model = instantiate(config or uma_config())
    return model.to(dtype).eval()


def save_uma_checkpoint(model: nn.Module, config: dict[str, Any], path: str | Path) -> None:
    """Write `model` (built from `config`) as a fairchem inference checkpoint, the format
    fairchem's `load_inference_model` (and `UMAWrapper.from_checkpoint`) reads."""
    from fairchem.core.units.mlip_unit.api.inference import MLIPInferenceCheckpoint

    checkpoint = MLIPInferenceCheckpoint(
        model_config=config,
        model_state_dict=model.state_dict(),
        ema_state_dict={},
        tasks_config={},
    )
    torch.save(checkpoint, path)
