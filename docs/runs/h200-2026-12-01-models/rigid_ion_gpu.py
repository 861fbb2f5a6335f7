"""Energy + forces time of RigidIonModel.nacl (Ewald, PME) in one process on a GPU."""

import time

import torch
from ase.build import bulk

from nvdd_plugins import Batch
from nvdd_plugins.models import PME, Ewald, RigidIonModel, evaluate_model

for cells, methods in ((6, ("ewald", "pme")), (10, ("ewald", "pme"))):
    atoms = bulk("NaCl", "rocksalt", a=5.64, cubic=True).repeat(cells)
    ew = Ewald.for_accuracy(6.0, 1e-6)
    for name in methods:
        es = ew if name == "ewald" else PME.for_cell(ew.alpha, atoms.cell.array, 0.5, 6)
        m = RigidIonModel.nacl(6.0, es).to("cuda")
        for dt in (torch.float64, torch.float32):
            b = Batch.from_atoms(atoms, device="cuda", dtype=dt)
            for _ in range(3):
                evaluate_model(m, b, ("energy", "forces"))
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(20):
                evaluate_model(m, b, ("energy", "forces"))
            torch.cuda.synchronize()
            print(
                len(atoms),
                name,
                dt,
                f"{1e3 * (time.perf_counter() - t) / 20:.2f} ms per energy+forces",
                flush=True,
            )
