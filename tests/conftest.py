"""Test-session set-up: one thread per process (forked ranks must not inherit OpenMP pools)."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
os.environ.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")

import torch

torch.set_num_threads(1)
