# Two commands do all of the set-up on a fresh machine (Python 3.11):
#   make demo   run the main job (the cute-shard command line) on an example
#   make test   run the whole test suite
# Both create .venv on first use. torch is pinned to 2.13.0: these machines serve a CPU wheel
# for it, while an unpinned torch would pull several GB of CUDA packages.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test bench lint clean

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

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check cute_shard tests property_tests bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build
