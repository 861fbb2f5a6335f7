# Set-up and checks. `make demo` and `make test` install everything first (idempotent).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.nvdd-installed

export OMP_NUM_THREADS ?= 1
export OMPI_ALLOW_RUN_AS_ROOT = 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = 1
export OMPI_MCA_rmaps_base_oversubscribe = 1

.PHONY: install demo test lint benchmarks

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install_mpi.sh scripts/install_lammps.sh
	scripts/install_mpi.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned, so nothing pulls a CUDA build onto a CPU machine
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[mace,cueq,dev]"
	scripts/install_lammps.sh $(PY)
	touch $@

demo: install
	$(VENV)/bin/torchrun --nproc_per_node=2 examples/distributed/03_mace_nvt_distributed.py

test: install
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

benchmarks: install
	$(PY) benchmarks/neighbor_list.py --sizes 1000 10000 100000
	$(PY) benchmarks/distributed_overhead.py
