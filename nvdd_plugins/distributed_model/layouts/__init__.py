"""Layouts: where a view's rows come from and where results go, over one step
(`SubdomainModel`): `DistributedModel` (owned atoms that migrate), `ReplicatedModel` (every
rank holds the system: the ASE calculator), `OneRankModel` under `OneProcessEvaluator` (one
process), `GivenRowsModel` (LAMMPS's rows) and `ChunkedEvaluator` (one process, in chunks)."""
