# reckon: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# apt as root without its sandbox user: on machines whose /tmp is not world-writable, the
# sandboxed download fails (seen here); and wait for a dpkg lock another apt holds at boot.
APT := apt-get -o APT::Sandbox::User=root -o DPkg::Lock::Timeout=300

.PHONY: test test-long test-browser test-compat demo install fuzz check-deep clean postgres-bin munge-bin chromium-bin bench-failover bench-cli-munge \
	slurm-reference

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The PostgreSQL tests start a private server (tests/pgserver.py) and need its binaries:
# installed here when missing and we are root; otherwise those tests fail saying how to install them.
postgres-bin:
	@if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && ! command -v pg_ctl >/dev/null 2>&1 \
	    && [ -z "$$RECKON_PG_BIN" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing PostgreSQL for the tests (apt-get install postgresql)"; \
	    $(APT) update -qq && DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq postgresql >/dev/null; \
	fi

# The MUNGE tests start a private munged (tests/munged.py) and need munged and libmunge.so.2: installed
# the same way (Debian's `munge` package) when missing and we are root; otherwise they fail saying so.
munge-bin:
	@if ! command -v munged >/dev/null 2>&1 && [ ! -x /usr/sbin/munged ] \
	    && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing MUNGE for the tests (apt-get install munge)"; \
	    $(APT) update -qq && DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq munge >/dev/null; \
	fi

# Two workers (the machine has 2 cores); the end-to-end tests share one (tests/conftest.py).
# PYTHONHASHSEED=0: the same set iteration order in every worker.  The model decides nothing by
# set order any more (tests/model/test_hash_order.py; the bites give the same results under other
# seeds), so this only pins what test code might still iterate; `make fuzz` varies both.
test: $(STAMP) postgres-bin munge-bin
	PYTHONHASHSEED=0 $(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not long and not browser"

# The slow checks (marker `long`): longer searches and runs than `make test` affords.
test-long: $(STAMP) postgres-bin munge-bin
	PYTHONHASHSEED=0 $(BIN)/python -m pytest -q -n 2 --dist loadgroup -m long

# The status page in a real headless Chromium (marker `browser`, tests/http/test_status_page.py): Debian's
# chromium installed when missing and we are root; where it cannot be installed or started, the test skips.
chromium-bin:
	@if ! command -v chromium >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Chromium for the browser test (apt-get install chromium)"; \
	    ($(APT) update -qq && DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq chromium >/dev/null) \
	        || echo "could not install chromium: the browser test will skip"; \
	fi

test-browser: $(STAMP) chromium-bin
	PYTHONHASHSEED=0 $(BIN)/python -m pytest -q -p no:cacheprovider -m browser tests/http

# The real workflow tools (submitit, dask-jobqueue, Parsl, Snakemake + its Slurm plugin) at the
# versions pinned in requirements-compat.txt, in a venv of their own, each running a workflow on a
# reckon cluster on loopback through reckon's Slurm commands (tests/compat/, docs/compat.md).
# tests/compat is collected only with RECKON_COMPAT=1.  One test at a time: each starts a cluster.
COMPAT_VENV := .venv-compat
COMPAT_STAMP := $(COMPAT_VENV)/.installed

$(COMPAT_STAMP): pyproject.toml requirements-compat.txt
	$(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/pip install --quiet --upgrade pip
	$(COMPAT_VENV)/bin/pip install --quiet -e '.[test]' -r requirements-compat.txt
	touch $(COMPAT_STAMP)

test-compat: $(COMPAT_STAMP)
	RECKON_COMPAT=1 PYTHONHASHSEED=0 $(COMPAT_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/compat

fuzz: $(STAMP)
	RECKON_HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q tests/model tests/sim -p no:cacheprovider

# The exhaustive explorer at its deep bound (tests/model/explorer.py DEEP; figures in docs/invariants.md).
check-deep: $(STAMP)
	$(BIN)/python -m tests.model.explorer --deep

# `reckon bench failover` against a private PostgreSQL (fsync on) that tests/pgserver.py starts and
# stops; an installed reckon takes the server's URL instead (--dsn).  ARGS: more bench options.
bench-failover: $(STAMP) postgres-bin
	$(BIN)/python -m tests.pgserver --durable -- $(BIN)/reckon bench failover $(ARGS)

# `reckon bench cli` on a token cluster and on a munge cluster, run after run, against a private munged.
bench-cli-munge: $(STAMP) munge-bin
	$(BIN)/python -m tests.munged -- $(BIN)/reckon bench cli --auth both $(ARGS)

# A real Slurm's output, the goldens of tests/slurmref/ (not run by CI: root, apt and minutes).  Installs
# Debian's slurm-wlm, slurmdbd, MariaDB and MUNGE, runs a private cluster on loopback
# (tests/slurmref/capture.py) and rewrites tests/slurmref/golden/.  ARGS: e.g. --keep, --raw DIR.
SLURM_PACKAGES := slurmctld slurmd slurm-client slurmdbd mariadb-server munge
slurm-reference: $(STAMP)
	@if [ "$$(id -u)" != 0 ]; then echo "make slurm-reference: run as root (it starts Slurm's daemons)"; exit 2; fi
	@if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmdbd >/dev/null 2>&1 \
	    || ! command -v mariadbd >/dev/null 2>&1; then \
	    echo "installing Slurm for the reference (apt-get install $(SLURM_PACKAGES))"; \
	    $(APT) update -qq && DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq \
	        $(SLURM_PACKAGES) >/dev/null; \
	fi
	$(BIN)/python -m tests.slurmref.capture $(ARGS)

demo: $(STAMP)
	$(BIN)/reckon demo

clean:
	rm -rf $(VENV) $(COMPAT_VENV) build *.egg-info
