# Set-up and checks. `make demo` and `make test` install everything first (idempotent).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.nvdd-installed
# sevenn needs e3nn >= 0.5 and mace-torch pins e3nn 0.4.4, so sevenn lives in an overlay
# environment: its own e3nn and sevenn, everything else (torch, nvdd) from $(VENV)
VENV_SEVENN ?= $(VENV)-sevenn
PY_SEVENN := $(VENV_SEVENN)/bin/python
STAMP_SEVENN := $(VENV_SEVENN)/.nvdd-installed
SEVENN_TESTS := tests/models/test_sevennet.py tests/distributed_model/test_sevennet_simulated.py \
	tests/test_examples.py::test_sevennet_example tests/torture/test_torture.py::test_sevennet_case

export OMP_NUM_THREADS ?= 1
export OMPI_ALLOW_RUN_AS_ROOT = 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = 1
export OMPI_MCA_rmaps_base_oversubscribe = 1

.PHONY: install install-sevenn demo test test-all lint benchmarks

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install_mpi.sh scripts/install_lammps.sh
	scripts/install_mpi.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned, so nothing pulls a CUDA build onto a CPU machine
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[mace,cueq,aimnet,dev]"
	scripts/install_lammps.sh $(PY)
	touch $@

install-sevenn: $(STAMP_SEVENN)

$(STAMP_SEVENN): $(STAMP)
	$(PY) -m venv $(VENV_SEVENN)
	$(PY) -c "import sysconfig; print(f'import site; site.addsitedir({sysconfig.get_path(\"purelib\")!r})')" \
		> $$($(PY_SEVENN) -c "import sysconfig; print(sysconfig.get_path('purelib'))")/nvdd_base_venv.pth
	$(PY_SEVENN) -m pip install --quiet --no-deps sevenn==0.13.0 e3nn==0.5.9 \
		torch_geometric==2.8.1 braceexpand==0.1.7 xxhash==4.1.0 psutil==7.2.2
	$(PY_SEVENN) -m pip install --quiet requests==2.34.2 scikit-learn==1.9.1
	touch $@

demo: install
	$(VENV)/bin/torchrun --nproc_per_node=2 examples/distributed/03_mace_nvt_distributed.py

test: install install-sevenn
	$(PY) -m pytest
	$(PY_SEVENN) -m pytest $(SEVENN_TESTS)

# the CI subset plus the tests marked slow (long sweeps, heavy compiles)
test-all: export NVDD_ALL_TESTS = 1
test-all: test

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

benchmarks: install
	$(PY) benchmarks/neighbor_list.py --sizes 1000 10000 100000
	$(PY) benchmarks/distributed_overhead.py
