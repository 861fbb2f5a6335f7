"""cuEquivariance MACE: conversion from e3nn, and the spec that distributes its kernels.

mace-torch's cuEquivariance models run their tensor products as `torch.ops.cuequivariance`
kernels on a GPU (on a CPU, cuequivariance-torch runs the same polynomials as plain torch
code, which op interception sees through). Only one of those kernels aggregates over edges:
the fused convolution, a `uniform_1d` call that gathers sender rows, contracts them with the
edge attributes and scatters onto receivers in one launch. `uniform_1d` is also called
without a scatter (the symmetric contraction), so the spec adapts it at the Python level,
where the call's output indices say which outputs are scatters: those are marked with
`scattered_onto_nodes`. The remaining kernels are per node (or per edge) and pass unchanged.

This module imports cuequivariance-torch; import it only for models that use it.
"""

from __future__ import annotations

import torch
from cuequivariance_torch.primitives.segmented_polynomial_uniform_1d import (
    SegmentedPolynomialFromUniform1dJit,
)
from torch import nn

from nvdd_plugins.models.mace import mace_spec
from nvdd_plugins.spec import MethodAdapter, MLIPSpec, OpAdapter, scattered_onto_nodes

__all__ = ["cueq_mace_spec", "require_cuda_kernels", "to_cuequivariance"]

_UNIFORM_1D_FORWARD = SegmentedPolynomialFromUniform1dJit.forward
# cuEquivariance kernels a mace model calls whose outputs are per node or per edge
_PER_ROW_KERNELS = (
    "uniform_1d",
    "segmented_transpose",
    "indexed_linear_B",
)


def to_cuequivariance(model: nn.Module) -> nn.Module:
    """The cuEquivariance twin of an e3nn mace `ScaleShiftMACE` (same weights, dtype and
    device) from mace-torch's own converter; the convolution is fused on CUDA (mace
    cannot fuse it on a CPU)."""
    from mace.cli.convert_e3nn_cueq import run  # optional dependency

    parameter = next(model.parameters())
    if parameter.device.type == "cuda":
        require_cuda_kernels()
    default_dtype = torch.get_default_dtype()
    try:  # the converter sets the global default dtype to the model's
        converted = run(model, device=parameter.device.type, return_model=True)
    finally:
        torch.set_default_dtype(default_dtype)
    return converted.to(device=parameter.device, dtype=parameter.dtype)


def require_cuda_kernels() -> None:
    """Raise a clear ImportError where cuEquivariance's CUDA kernels do not load: without
    them cuequivariance-torch falls back to plain torch code, and mace's fused convolution
    then fails deep in its converter ("'SegmentedPolynomialNaive' object has no attribute
    'buffer_num_segments'")."""
    try:
        import cuequivariance_ops_torch  # noqa: F401
    except ImportError as err:
        raise ImportError(
            f"cuEquivariance's CUDA kernels did not load (import cuequivariance_ops_torch: "
            f"{err}): install cuequivariance-ops-torch-cu12 or -cu13, as your CUDA needs, "
            "with its dependencies"
        ) from err


def uniform_1d_forward(
    self: SegmentedPolynomialFromUniform1dJit,
    inputs: list[torch.Tensor],
    input_indices: dict[int, torch.Tensor],
    output_shapes: dict[int, torch.Tensor],
    output_indices: dict[int, torch.Tensor],
) -> list[torch.Tensor]:
    """cuequivariance's `uniform_1d` forward, with every output written through an index
    (a scatter) marked as a node aggregation."""
    outputs = _UNIFORM_1D_FORWARD(self, inputs, input_indices, output_shapes, output_indices)
    return [
        scattered_onto_nodes(out) if position in output_indices else out
        for position, out in enumerate(outputs)
    ]


def cueq_mace_spec(n_layers: int | None = None) -> MLIPSpec:
    """`mace_spec` plus the cuEquivariance kernels: the fused convolution's scatter is marked
    (a `MethodAdapter` on `uniform_1d`'s forward); the per-row kernels loaded in this
    process are declared so; `n_layers`: the model's interactions."""
    kernels = tuple(
        OpAdapter(op=getattr(torch.ops.cuequivariance, name))
        for name in _PER_ROW_KERNELS
        if hasattr(torch.ops.cuequivariance, name)
    )
    method = MethodAdapter(
        target=(
            "cuequivariance_torch.primitives.segmented_polynomial_uniform_1d:"
            "SegmentedPolynomialFromUniform1dJit.forward"
        ),
        replacement=uniform_1d_forward,
    )
    return mace_spec(kernels, (method,), n_layers)
