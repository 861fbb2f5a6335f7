"""Layouts: where a view's rows come from and where results go back. `DistributedModel`
(owned atoms that migrate), `ReplicatedModel` (every rank holds the system: the ASE
calculator), `GivenRowsModel` (LAMMPS's rows), `OneProcessEvaluator` and `ChunkedEvaluator`
(one process)."""
