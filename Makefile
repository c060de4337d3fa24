# reckon: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo install fuzz check-deep clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Two workers (the machine has 2 cores); the end-to-end tests share one (tests/conftest.py).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

fuzz: $(STAMP)
	RECKON_HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q tests/model tests/sim -p no:cacheprovider

# The exhaustive explorer at its deep bound (tests/model/explorer.py DEEP; figures in docs/invariants.md).
check-deep: $(STAMP)
	cd tests/model && ../../$(BIN)/python explorer.py --deep

demo: $(STAMP)
	$(BIN)/reckon demo

clean:
	rm -rf $(VENV) build *.egg-info
