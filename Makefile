# commbench developer targets. `make demo` and `make test` are the README's two commands.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
# The CPU build of torch, pinned, installed only where no torch is importable: a GPU user
# keeps the CUDA build they already have, and a CPU machine never downloads CUDA wheels.
TORCH_CPU ?= torch==2.13.0+cpu
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

# Python writes its bytecode caches here, whatever the machine's image says: with
# PYTHONDONTWRITEBYTECODE set, every process a test starts (torchrun's workers, the CLI) compiles
# commbench's modules again, and each pytest-xdist worker compiles and assertion-rewrites every
# test module again: about a tenth of the fast lane's CPU.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install test test-fast lint deps docs bench demo clean slurm-deps browser-deps metrics-deps postgres-deps gpu-check browser-check

install:
	@$(PYTHON) -c "import torch" 2>/dev/null || \
		$(PIP) install --retries 1 --extra-index-url $(TORCH_CPU_INDEX) "$(TORCH_CPU)"
	$(PIP) install -q -e ".[dev]"

demo: install
	commbench topo
	commbench collectives

test: install
	$(PYTHON) -m pytest -q

# The loop while working: the tests that start no process (tests/conftest.py fails any
# unmarked test that does). `make test` runs these and the marked ones. CPU-bound (half of it
# matplotlib drawing the figures the tests ask for), so spread over every core by pytest-xdist
# (the dev extra): 2 cores halve the wall time. Serial where xdist is not installed.
FAST_WORKERS ?= $(shell $(PYTHON) -c "import xdist" 2>/dev/null && echo "-n logical")
test-fast:
	$(PYTHON) -m pytest -q -p no:cacheprovider $(FAST_WORKERS) -m "not integration and not netns and not slurm and not gpu"

lint: deps
	$(PYTHON) -m ruff check commbench tests benchmarks
	$(PYTHON) -m ruff format --check commbench tests benchmarks
	$(PYTHON) -m mypy commbench

# Every import is a declared dependency, none is only a dependency's dependency, none declared
# goes unused (deptry, configured in pyproject.toml): the package against its runtime
# dependencies, then the suite and the benchmarks against those and the dev extra.
# fixtures/topology holds the suite's fake NVML (imported by path); make_param.py regenerates a
# fixture with PARAM (param_bench) installed, by hand, and nothing runs it here.
deps:
	$(PYTHON) -m deptry commbench
	$(PYTHON) -m deptry tests tests/fixtures/topology benchmarks --ignore DEP002,DEP004 \
		--per-rule-ignores DEP001=param_bench

# docs/cli.md, the reference of every command and option, made from their declarations
# (tests/test_options.py fails while it is stale), and docs/collectives.md's op table, made
# from the ops' (tests/test_docs.py fails while it is stale).
docs:
	$(PYTHON) -m commbench.cli.reference > docs/cli.md
	$(PYTHON) -m commbench.cli.reference --synopses docs
	$(PYTHON) -m commbench.collectives.table docs/collectives.md

bench: install
	$(PYTHON) benchmarks/harness_overhead.py

# The GPU evidence within 8 minutes, into results/reference/<gpu-model>/ (README.md there has
# the figures), or with $$OUT set, two files there. From a plain checkout: it installs nothing
# (no package index needed); torch, a CUDA build for this driver (docs/development.md: Which torch for which
# driver), and commbench's dependencies must import, else one line names what is missing, exit
# 2. Without a CUDA GPU: one line, exit 2.
gpu-check:
	@$(PYTHON) benchmarks/gpu_check.py

# A real SLURM for the multi-node integration test (Debian/Ubuntu, as root). Without it
# that one test is skipped, except under CI=true where it fails.
# (iproute2's `ss` is how the test's cluster checks that each daemon listens on its own port.)
slurm-deps:
	@if command -v slurmd >/dev/null && command -v munged >/dev/null && command -v ss >/dev/null; \
		then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			slurmd slurmctld slurm-client munge iproute2 >/dev/null; \
	else echo "slurm-deps: not root or no apt-get; the SLURM test will be skipped"; fi

# Debian's Chromium for the browser test of the HTML report (skipped without it).
browser-deps:
	@if command -v chromium >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "browser-deps: chromium did not install; the browser test will be skipped"; \
	else echo "browser-deps: not root or no apt-get; the browser test will be skipped"; fi

# Debian's Prometheus (promtool, and the server) and node_exporter (package
# prometheus-node-exporter) for the lint of `commbench export`'s metrics and the test that
# scrapes them through the textfile collector. Without them those tests are skipped, except
# under CI=true where they fail. The tests start their own daemons: the services the install
# starts are stopped and disabled.
metrics-deps:
	@if command -v promtool >/dev/null && command -v prometheus >/dev/null && \
		command -v prometheus-node-exporter >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends prometheus prometheus-node-exporter >/dev/null; \
		if command -v systemctl >/dev/null; then for s in prometheus prometheus-node-exporter; do \
			if systemctl is-active --quiet $$s 2>/dev/null || systemctl is-enabled --quiet $$s 2>/dev/null; \
			then systemctl disable --now $$s >/dev/null 2>&1 || true; fi; done; fi; \
	else echo "metrics-deps: not root or no apt-get; the Prometheus tests will be skipped"; fi

# Debian's PostgreSQL server for the history's tests against a real database
# (tests/postgres.py starts a throwaway server of its own, as the user postgres, on a free
# port). Without it those tests are skipped, except under CI=true where they fail. The
# service the install starts (and its cluster on port 5432) is stopped and disabled.
postgres-deps:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends postgresql >/dev/null; \
		if command -v systemctl >/dev/null && \
			{ systemctl is-active --quiet postgresql 2>/dev/null || \
			  systemctl is-enabled --quiet postgresql 2>/dev/null; }; then \
			systemctl disable --now postgresql >/dev/null 2>&1 || true; fi; \
		if command -v pg_lsclusters >/dev/null; then \
			pg_lsclusters -h 2>/dev/null | while read -r version cluster port state rest; do \
				if [ "$$state" = online ]; then pg_ctlcluster "$$version" "$$cluster" stop || true; fi; \
			done; fi; \
	else echo "postgres-deps: not root or no apt-get; the PostgreSQL tests will be skipped"; fi

# The HTML report in Debian's headless Chromium (apt-get install chromium): no outside
# reference, every image decodes, a screenshot in /tmp/commbench-browser/screenshot.png.
browser-check:
	$(PYTHON) benchmarks/report_in_browser.py tests/fixtures/runs/h100x8-golden --out /tmp/commbench-browser

clean:
	rm -rf build *.egg-info .pytest_cache .ruff_cache .mypy_cache
