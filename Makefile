# Two commands do all of the set-up on a fresh machine (Python 3.11):
#   make demo   run the main job (the cute-shard command line) on an example
#   make test   run the whole test suite
# Both create .venv on first use. torch is pinned to 2.13.0: these machines serve a CPU wheel
# for it, while an unpinned torch would pull several GB of CUDA packages.
#   make test-torch VERSION=2.15.0   the whole suite against another supported torch release,
#                                    in its own venv (.venv-torch-2.15.0)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test test-torch bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/cute-shard explain --shape 8,16,32 --mesh 2,4 --placements S0,S1 --view 128,32

# Two workers for the two cores; --dist loadfile keeps each module on one worker, so a module's
# run-once fixtures (a gloo world's spawn, a fake process group) still run once.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# The whole suite on torch==$(VERSION) (2.13.x, 2.14.x, 2.15.x), the package installed beside it
# as a user with that torch would (its range admits it, so torch is kept). PIP_ENV: set for
# that venv's pip, e.g. PIP_ENV=PIP_CONFIG_FILE=/dev/null where a machine's pip configuration
# caps torch below the release asked for.
VERSION ?= 2.14.1
TVENV   := .venv-torch-$(VERSION)
PIP_ENV ?=

$(TVENV)/.installed-stamp: pyproject.toml
	$(PYTHON) -m venv $(TVENV)
	$(PIP_ENV) $(TVENV)/bin/pip install --quiet torch==$(VERSION)
	$(PIP_ENV) $(TVENV)/bin/pip install --quiet -e '.[test]'
	$(TVENV)/bin/python -c "import torch, sys; v = torch.__version__.split('+')[0]; \
	  sys.exit(f'torch {v} installed, $(VERSION) asked for' if v != '$(VERSION)' else 0)"
	touch $@

test-torch: $(TVENV)/.installed-stamp
	$(TVENV)/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check cute_shard tests property_tests bench

clean:
	rm -rf $(VENV) .venv-torch-* .pytest_cache .hypothesis build
