"""The tests' private PostgreSQL: the package's (daemon/bench/pgserver.py), so the benchmarks
of an installed package can start one too."""

from reckon.daemon.bench.pgserver import INSTALL_HINT, USER, PgServer, find_bin_dir  # noqa: F401
