# Two entry points (see README): `make demo` runs the main job end to end,
# `make test` runs lint, type checks and the test suite. Both install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test lint bench clean

install: $(VENV)/.installed $(VENV)/.built

# the compiled core's sources (setup.py's CORE and their .pxd): when one changes, the extension
# modules are rebuilt in place, so a checkout never runs a core compiled from older source
CORE_SRC := $(wildcard allocator/arena.p* allocator/cost.p* allocator/records.p* allocator/loop.p* \
	allocator/pool.p* policies/kernels.p* allocator/seams.p* policies/base.p* policies/lru.p* \
	policies/classic.p* policies/adaptive.p* policies/priority.p* policies/lirs.p* \
	policies/shadow.p* policies/features.p* policies/prefetch.p* policies/learned/models.p* \
	policies/learned/guards.p* policies/learned/policy.p* policies/learned/prefetch_head.p* \
	policies/learned/network.p* policies/successors.p* allocator/prefetch_timing.p*)

$(VENV)/.installed: pyproject.toml constraints.txt setup.py
	$(PYTHON) -m venv $(VENV)
	# setup.py build_ext (below) runs in this venv, which holds no setuptools (3.12+) or an older
	# one (3.10, 3.11) than pyproject.toml's [build-system] requires
	$(PY) -m pip install -q --upgrade pip 'setuptools>=77'
	# CACHEGYM_NO_COMPILE: the editable install does not compile the core (one module at a
	# time: 4.7 minutes on 2 cores); .built below does, in place, two at a time (2.4 minutes)
	CACHEGYM_NO_COMPILE=1 $(PY) -m pip install -q -c constraints.txt -e '.[train,dev,cluster]'
	touch $@

$(VENV)/.built: $(VENV)/.installed $(CORE_SRC)
	$(PY) setup.py -q build_ext --inplace -j 2
	touch $@

demo: install
	$(PY) scripts/main.py

lint: install
	$(PY) -m ruff check allocator policies envs scripts tests cachegym
	$(PY) -m mypy

# the suite on the compiled core, then the parity, golden and pool-invariant tests on the same
# source interpreted (CACHEGYM_PURE_PYTHON=1). The learned policy's goldens are left out there:
# its forward pass interpreted takes minutes per trace, and tests/policies/test_features.py
# holds the compiled kernels bit for bit equal to the same source interpreted.
PURE_TESTS := tests/golden tests/policies/test_parity.py tests/allocator/test_pool.py \
	tests/allocator/test_pool_stateful.py tests/allocator/test_faults.py tests/allocator/test_core.py \
	tests/allocator/test_forget.py tests/allocator/test_clean_ahead.py tests/allocator/test_pool_api.py \
	tests/allocator/test_forwarding.py tests/allocator/test_policy_mistakes.py tests/allocator/test_concurrency.py \
	-k "not test_learned_policy and not test_quality_benchmark"

# on TEST_WORKERS processes (pytest-xdist; the tests share no files): 23.5 -> 12.6 minutes on
# 2 cores. TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -p no:cacheprovider --timeout=900 -n $(TEST_WORKERS) --dist worksteal

test: lint
	$(PYTEST)
	CACHEGYM_PURE_PYTHON=1 $(PYTEST) $(PURE_TESTS)

bench: install
	$(PY) scripts/bench.py pool

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache .mypy_cache .ruff_cache
