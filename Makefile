# commbench developer targets. `make demo` and `make test` are the README's two commands.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
# The CPU build of torch, pinned, installed only where no torch is importable: a GPU user
# keeps the CUDA build they already have, and a CPU machine never downloads CUDA wheels.
TORCH_CPU ?= torch==2.13.0+cpu
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install test lint bench demo clean

install:
	@$(PYTHON) -c "import torch" 2>/dev/null || \
		$(PIP) install --retries 1 --extra-index-url $(TORCH_CPU_INDEX) "$(TORCH_CPU)"
	$(PIP) install -q -e ".[dev]"

demo: install
	commbench topo
	commbench collectives

test: install
	$(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff check commbench tests benchmarks
	$(PYTHON) -m ruff format --check commbench tests benchmarks
	$(PYTHON) -m mypy commbench

bench: install
	$(PYTHON) benchmarks/harness_overhead.py

clean:
	rm -rf build *.egg-info .pytest_cache .ruff_cache .mypy_cache
