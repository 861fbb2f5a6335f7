"""RigidIonModel (Ewald, PME) on CUDA equals the same model on the CPU, in one process."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import Batch
from nvdd_plugins.models import evaluate_model
from tests.helpers.ionic import nacl_model, triclinic_nacl
from tests.helpers.oracle import assert_close, errors, properties_for, reference

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("method", ["ewald", "pme"])
def test_cuda_equals_cpu(method: str) -> None:
    atoms = triclinic_nacl()
    properties = properties_for(atoms)
    ref = reference(nacl_model(method, atoms), atoms, properties)
    model = nacl_model(method, atoms).to("cuda")
    out = evaluate_model(model, Batch.from_atoms(atoms, device="cuda"), properties)
    assert_close(errors({k: v.cpu() for k, v in out.items()}, ref, len(atoms)), method)
