# Two entry points (see README): `make demo` runs the main job end to end,
# `make test` runs lint, type checks and the test suite. Both install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test lint bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt setup.py $(wildcard allocator/*.pxd) $(wildcard policies/*.pxd)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[train,dev]'
	touch $@

demo: install
	$(PY) scripts/main.py

lint: install
	$(PY) -m ruff check allocator policies envs scripts tests
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -q -p no:cacheprovider --timeout=900

bench: install
	$(PY) scripts/bench.py pool

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache .mypy_cache .ruff_cache
