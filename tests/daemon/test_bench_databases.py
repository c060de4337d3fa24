"""The benchmarks' PostgreSQL is the operator's (--dsn, daemon/bench/pgdatabases.py); the private
server is test infrastructure (tests/pgserver.py), out of the installed package, and starts one
for a bench run from a checkout (`python -m tests.pgserver --durable -- reckon bench ...`)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from reckon.daemon.bench.pgdatabases import DSN_ENV, BenchDatabaseError, BenchDatabases
from reckon.daemon.cli.main import build_parser
from reckon.daemon.store.postgres import PgFactStore
from tests.daemon.store_helpers import submits

REPO = Path(__file__).resolve().parents[2]


def _postgres_or_gone(pid: int) -> str | None:
    """"postgres" for a live server process, "gone" for one that exited since it was listed (a
    backend whose client closed: absent, or a zombie with an empty command line), else None."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
    if state in ("Z", "X"):
        return "gone"
    return "postgres" if cmdline.startswith(b"postgres") else None


def _databases(dsn: str) -> set[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database").fetchall()}


def test_each_run_gets_a_fresh_database_and_every_one_is_dropped_at_the_end(postgres):
    server_dsn = postgres.dsn()
    with BenchDatabases(server_dsn) as dbs:
        first, second = dbs.new_database(), dbs.new_database()
        assert first != second and first.startswith("postgresql://") and "host=" in first
        made = {dsn.split("?")[0].rsplit("/", 1)[1] for dsn in (first, second)}
        assert made <= _databases(server_dsn)

        async def use(dsn: str) -> int:  # a controller's store can live in it
            async with await PgFactStore.open(dsn, holder="bench") as store:
                assert await store.try_lead() is not None
                return await store.append(submits(1, 2))

        assert trio.run(use, first) == 2
        pids = dbs.server_pids()  # a server on this machine: its processes, for CPU figures
        assert pids and all(_postgres_or_gone(pid) for pid in pids)
        assert any(_postgres_or_gone(pid) == "postgres" for pid in pids)  # the server's own writers stay
    assert not made & _databases(server_dsn)


@pytest.mark.parametrize("dsn, status, said", [
    (None, 2, "this bench needs a PostgreSQL server: give --dsn"),
    ("mysql://x/y", 2, "--dsn must be a postgresql:// URL"),
])
def test_no_usable_dsn_is_one_line_before_anything_starts(dsn, status, said):
    with pytest.raises(BenchDatabaseError, match=re.escape(said)) as raised:
        BenchDatabases(dsn)
    assert raised.value.status == status


def _reckon(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RECKON_")}
    return subprocess.run([sys.executable, "-m", "reckon.daemon.cli.main", *argv], capture_output=True, text=True,
                          env={**base, **(env or {})}, cwd=REPO, timeout=120, stdin=subprocess.DEVNULL)


def test_the_failover_bench_without_a_server_or_with_one_it_cannot_reach_says_so_in_one_line(tmp_path):
    result = _reckon("bench", "failover", "--runs", "1")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("reckon: this bench needs a PostgreSQL server") and \
        result.stderr.count("\n") == 1, result.stderr
    result = _reckon("bench", "throughput", "--store", "postgres", "--runs", "1",
                     env={DSN_ENV: f"postgresql://nobody:secret@/x?host={tmp_path}"})
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("reckon: cannot connect to postgresql://nobody@") and \
        result.stderr.count("\n") == 1 and "secret" not in result.stderr, result.stderr


def test_the_dsn_option_and_its_default_from_the_environment(monkeypatch):
    monkeypatch.delenv(DSN_ENV, raising=False)
    assert build_parser().parse_args(["bench", "failover"]).dsn is None
    monkeypatch.setenv(DSN_ENV, "postgresql://u@/d")
    assert build_parser().parse_args(["bench", "failover"]).dsn == "postgresql://u@/d"
    assert build_parser().parse_args(["bench", "throughput", "--dsn", "postgresql://v@/e"]).dsn == "postgresql://v@/e"


def test_from_a_checkout_the_private_server_runs_a_command_against_it_and_is_gone_after():
    probe = ("import os, psycopg; dsn = os.environ['RECKON_BENCH_DSN']; "
             "conn = psycopg.connect(dsn); print(conn.execute('SHOW fsync').fetchone()[0], "
             "conn.execute('SHOW data_directory').fetchone()[0]); conn.close()")
    base = {k: v for k, v in os.environ.items() if k != DSN_ENV}
    result = subprocess.run([sys.executable, "-m", "tests.pgserver", "--durable", "--", sys.executable, "-c", probe],
                            capture_output=True, text=True, cwd=REPO, env=base, timeout=120)
    assert result.returncode == 0, result.stderr
    fsync, data = result.stdout.split()
    assert fsync == "on" and not Path(data).exists()  # durable, as the benchmarks want; stopped and removed
    failing = subprocess.run([sys.executable, "-m", "tests.pgserver", "--", sys.executable, "-c", "exit(3)"],
                             capture_output=True, cwd=REPO, timeout=120)
    assert failing.returncode == 3  # the command's own status
    usage = subprocess.run([sys.executable, "-m", "tests.pgserver", "true"], capture_output=True, text=True,
                           cwd=REPO, timeout=60)
    assert usage.returncode == 2 and "usage: python -m tests.pgserver" in usage.stderr


def test_the_installed_package_holds_no_test_infrastructure():
    assert importlib.util.find_spec("reckon.daemon.bench.pgserver") is None
    imports_tests = re.compile(r"^\s*(from|import)\s+tests\b", re.MULTILINE)
    offenders = [str(p.relative_to(REPO)) for folder in ("daemon", "model", "reckon")
                 for p in (REPO / folder).rglob("*.py") if imports_tests.search(p.read_text())]
    assert offenders == []
