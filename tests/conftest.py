import os

from hypothesis import HealthCheck, settings

# Two profiles: `ci` fits `make test` on 2 cores; `fuzz` is for long runs
# (RECKON_HYPOTHESIS_PROFILE=fuzz, see the README).
# `ci`: the stateful machine (tests/model/test_stateful.py) runs 300 runs of
# 50 steps in about 10 s on 2 cores; the bite tests derive their settings from it.
# `ci` is derandomized: the same examples every run, so a red `make test` is a change's
# doing, never the draw's; `fuzz` draws new examples (and keeps finds in the example database).
settings.register_profile(
    "ci",
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("RECKON_FUZZ_EXAMPLES", "100000")),
    stateful_step_count=120,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
settings.load_profile(os.environ.get("RECKON_HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    """`make test` runs on two pytest-xdist workers (`--dist loadgroup`).  The end-to-end
    tests start real daemons and jobs: they share one worker, one at a time, so that no two
    real clusters compete for the machine while the other worker runs the in-process tests."""
    import pytest

    for item in items:
        if "/tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.xdist_group("e2e"))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def postgres():
    """One real PostgreSQL per test session (tests/pgserver.py); each test asks it for a fresh database.
    Without PostgreSQL binaries this fails, with how to install them: it never skips."""
    from tests.pgserver import PgServer

    server = PgServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def munged():
    """One real munged per test session (tests/munged.py), with a key of its own.  Without MUNGE
    installed this fails, saying what to install: it never skips."""
    from tests.munged import Munged

    daemon = Munged().start()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def pg_dsn(postgres):
    """A fresh, empty database on the session's PostgreSQL."""
    return postgres.new_database()


def pytest_terminal_summary(terminalreporter):
    """Print what tests recorded as ``record_property("report", ...)`` (the explorer's state counts),
    also under ``-q`` and from pytest-xdist workers, whose output pytest does not show."""
    lines = [value for reports in terminalreporter.stats.values() for rep in reports
             if getattr(rep, "when", None) == "call"
             for name, value in getattr(rep, "user_properties", ()) if name == "report"]
    if lines:
        terminalreporter.write_sep("-", "reports")
        for line in lines:
            terminalreporter.write_line(line)
