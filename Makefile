# Attention, step by step -- set-up, notebooks and tests.
#
#   make lab        open the notebooks in JupyterLab (does its own set-up)
#   make test       unit/property tests + nbval over every notebook (does its own set-up)
#   make notebooks  re-execute every notebook in place, in a fresh kernel each
#   make setup      create .venv and install the project with its dev tools
#   make colab-check      the built wheel + every notebook in a fresh venv with Colab's ipywidgets 7.7.1
#   make bench      forward-pass benchmark (time and memory) of the attention implementations
#   make bench-explorers  in-kernel redraw time of each explorer
#   make clean      remove build artefacts and caches (distclean: also .venv)
#
# torch is installed on its own, first, from TORCH_SPEC (pip arguments), so
# that the project's `torch>=2.2` is already met and pip fetches no other
# build. The default suits CPU-only machines whose pip finds the local CPU
# wheel; e.g. `make setup TORCH_SPEC="torch==2.13.0 --index-url URL"` picks
# another build, and TORCH_SPEC= (empty) leaves torch to pip's resolver.

PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=
LAB_ARGS   ?=

VENV_PY := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# Passed through the environment so that `>`, `<` or `[` in it reach pip
# verbatim (word-split by the shell, but never parsed as redirections/globs).
export TORCH_SPEC

# `notebooks/` may not exist yet (or hold no notebook): pass it only if present.
NOTEBOOK_DIRS := $(wildcard notebooks)
NBVAL_ARGS := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg
# Same kernel environment as scripts/execute_notebooks.py, so that stored and
# fresh outputs are produced alike.
KERNEL_ENV := PYTHONHASHSEED=0 SOURCE_DATE_EPOCH=0

.DEFAULT_GOAL := help
.PHONY: help setup lab test notebooks colab-check bench bench-explorers clean distclean FORCE

help:
	@sed -n 's/^#   make /  make /p' $(firstword $(MAKEFILE_LIST))

setup: $(STAMP)

$(VENV_PY):
	$(PYTHON) -m venv $(VENV)

# Rewritten only when TORCH_SPEC changes, so that a new spec re-runs the install.
$(VENV)/.torch-spec: FORCE | $(VENV_PY)
	@printf '%s\n' "$$TORCH_SPEC" | cmp -s - $@ || printf '%s\n' "$$TORCH_SPEC" > $@

$(STAMP): pyproject.toml $(VENV)/.torch-spec | $(VENV_PY)
	@if [ -n "$$TORCH_SPEC" ]; then \
		echo "+ pip install $$TORCH_SPEC"; \
		set -f; $(VENV_PY) -m pip install $$TORCH_SPEC; \
	else \
		echo "TORCH_SPEC is empty: leaving torch to pip's resolver"; \
	fi
	$(VENV_PY) -m pip install -e ".[dev]"
	@$(VENV_PY) -c "import torch; print('torch', torch.__version__, '- CUDA available:', torch.cuda.is_available())"
	@touch $@

# JupyterLab refuses to run as root unless told to (containers, CI machines).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: setup
	$(VENV)/bin/jupyter lab notebooks/ $(ALLOW_ROOT) $(LAB_ARGS)

test: setup
	$(KERNEL_ENV) $(VENV_PY) -m pytest tests $(NOTEBOOK_DIRS) $(NBVAL_ARGS) -p no:cacheprovider $(PYTEST_ARGS)

notebooks: setup
ifeq ($(NOTEBOOK_DIRS),)
	@echo "No notebooks/ folder: nothing to execute."
else
	$(VENV_PY) scripts/execute_notebooks.py $(NOTEBOOK_DIRS)
endif

colab-check:
	PYTHON=$(PYTHON) scripts/colab_like_check.sh

bench: setup
	$(VENV_PY) benchmarks/bench_forward.py

bench-explorers: setup
	$(VENV_PY) benchmarks/bench_explorers.py

clean:
	rm -rf build dist .pytest_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name '*.egg-info' -prune -exec rm -rf {} + \
		-o -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
