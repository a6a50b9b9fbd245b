# flaxgraph developer commands. Everything installs into ./.venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HYPOTHESIS_PROFILE ?= $(if $(CI),ci,dev)

.PHONY: install test oracle conformance clients clients-ci browser guides-html docs demo demo-distributed bench bench-quick lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,demo,checkpoint,linen,clients]"
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install flaxgraph (editable) with test, demo, checkpoint, linen and clients extras

test: $(STAMP) browser  ## run the whole suite, guides included
	$(BIN)/python -m pytest -n 2 --hypothesis-profile=$(HYPOTHESIS_PROFILE) $(PYTEST_ARGS)

oracle: $(STAMP)  ## the differential oracle (real Flax NNX 0.12.8 vs flaxgraph) on 2,000 generated programs (make test runs a bounded number)
	ORACLE_EXAMPLES=$(or $(ORACLE_EXAMPLES),2000) $(BIN)/python -m pytest -p no:randomly -n 2 tests/oracle

conformance: $(STAMP)  ## Flax 0.12.8's own tests/nnx against flaxgraph, checked against tests/conformance/deviations.txt
	$(BIN)/python tests/conformance/run_flax_tests.py

CLIENTS_SUBSET ?= all
clients: $(STAMP)  ## the client contract: released Tunix, qwix and MaxText (from the package registry) drive flax.nnx once on real Flax and once on flaxgraph (the drop-in); every scenario's numbers and checkpoint trees must agree (tests/clients/contract.py)
	$(BIN)/python tests/clients/contract.py --subset $(CLIENTS_SUBSET) $(CLIENTS_ARGS)

clients-ci: $(STAMP)  ## the bounded subset of `make clients` that CI runs: every client (Tunix 5 scenarios, qwix 2, MaxText 2), about 10 CPU-minutes plus building the environments
	$(BIN)/python tests/clients/contract.py --subset ci $(CLIENTS_ARGS)

# Headless Chromium (Debian package) for tests/test_guides_browser.py. Installed with
# apt-get when missing and possible (root); otherwise that test is skipped with a reason.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
	    >/dev/null 2>&1 && echo "installed chromium for the browser test"; } || \
	  echo "chromium is not installed (needs root and apt-get): the browser test will be skipped"

guides-html: $(STAMP)  ## run the guides in a Jupyter kernel and export them to outputs/guides/*.html
	$(BIN)/python guides/run_guide.py --html outputs/guides $(sort $(wildcard guides/*.md))

docs: $(STAMP) browser  ## build the documentation site into outputs/docs/ (Sphinx + MyST-NB), then check it in Chromium
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	$(BIN)/python docs/build.py --jobs 2
	$(BIN)/python -m pytest -q -p no:randomly -n 0 tests/test_docs.py tests/test_docs_site.py

demo: $(STAMP)  ## run the main job: train an ensemble on the digits data set
	$(BIN)/python guides/digits_ensemble.py

demo-distributed: $(STAMP)  ## multi-process training: 2 processes x 2 CPU devices on 127.0.0.1
	$(BIN)/python guides/distributed_train.py --launch 2 --devices-per-process 2

bench: $(STAMP)  ## benchmarks side by side with jax.jit, Flax NNX and Equinox
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	$(BIN)/python -m benchmarks.graph
	$(BIN)/python -m benchmarks.transforms
	$(BIN)/python -m benchmarks.pytree
	$(BIN)/python -m benchmarks.tunix_peft
	$(BIN)/python -m benchmarks.memory

lint: $(STAMP)  ## ruff (lint and format), the mypy type check of flaxgraph/ (configured in pyproject.toml), and the code counts that only go down (tests/code_counts.py)
	$(BIN)/ruff check flaxgraph tests benchmarks guides
	$(BIN)/ruff format --check flaxgraph tests benchmarks
	$(BIN)/python -m mypy
	$(BIN)/python tests/code_counts.py

clean:
	rm -rf $(VENV) .venv-clients .venv-clients-maxtext .pytest_cache .hypothesis .mypy_cache
