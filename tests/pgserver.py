"""The tests' private PostgreSQL: initdb + pg_ctl in a temporary directory (test infrastructure,
not part of the installed package).

The tests start one server per session (per pytest-xdist worker, tests/conftest.py).  It
listens only on a Unix socket in its own directory; each user gets a fresh database from
``PgServer.new_database``.  As root, PostgreSQL refuses to run, so the server runs as
``nobody`` (``runuser``).  When no PostgreSQL binaries are found, ``PgServer()`` raises with
``INSTALL_HINT`` (the tests FAIL with it; ``make test`` installs them when it can).

``with PgServer() as server:`` starts it and stops it (and removes its directory) however the
block ends, Ctrl-C included.

The benchmarks that need PostgreSQL take the DSN of a server (``reckon bench failover --dsn``);
from a checkout this module starts one for them and runs the command given after ``--`` with
``RECKON_BENCH_DSN`` set (fsync on with ``--durable``, as the benchmarks want)::

    python -m tests.pgserver --durable -- reckon bench failover

The server dies with the process that started it, also one killed with
SIGKILL (whose teardown never runs): a watchdog process (this file, run with
``--watchdog``) holds the read end of a pipe whose write end only the starting
process has; when that process is gone the read sees end-of-file, and the
watchdog stops the server (``pg_ctl stop -m immediate``) and removes its
directory.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

INSTALL_HINT = ("the PostgreSQL tests need the PostgreSQL server binaries (initdb, pg_ctl, postgres): "
                "install them (Debian/Ubuntu: `apt-get install postgresql`; `make test` does this itself "
                "when run as root) or point RECKON_PG_BIN at their directory")
USER = "reckon"  # the database superuser initdb creates (local connections trust it)


def find_bin_dir() -> Path | None:
    explicit = os.environ.get("RECKON_PG_BIN")
    candidates = [explicit] if explicit else []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    # Debian keeps the server binaries off PATH; newest major version first.
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True)
    for c in candidates:
        if c and all((Path(c) / b).exists() for b in ("initdb", "pg_ctl", "postgres")):
            return Path(c)
    return None


class PgServer:
    def __init__(self, *, durable: bool = False) -> None:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError(INSTALL_HINT)
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="reckon-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.socket_dir.mkdir()
        self.port = 5432  # only names the socket file: nothing listens on TCP
        self._run_as: list[str] = []
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            for p in (self.root, self.socket_dir):
                os.chown(p, nobody.pw_uid, nobody.pw_gid)
            self._run_as = ["runuser", "-u", "nobody", "--"]
        self._names = itertools.count(1)
        # The tests need no durability (fsync off: faster); the benchmarks compare with SQLite's
        # synchronous=FULL, so theirs fsyncs every commit as a production server does.
        self.durable = durable
        self.started = False
        self._watchdog: subprocess.Popen | None = None
        self._lifeline: int | None = None  # the pipe's write end: closed when this process ends

    def _run(self, *argv: str) -> None:
        result = subprocess.run([*self._run_as, *argv], capture_output=True, text=True, timeout=120,
                                cwd=self.root)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stdout}{result.stderr}")

    def _pg_ctl_stop(self) -> list[str]:
        """Stop at once, as a crash would (``self._run`` adds the user to run it as)."""
        return [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]

    def _start_watchdog(self) -> None:
        read_end, self._lifeline = os.pipe()  # both non-inheritable: only the watchdog is given read_end
        try:
            self._watchdog = subprocess.Popen(
                [sys.executable, __file__, "--watchdog", str(read_end), str(self.root), *self._run_as,
                 *self._pg_ctl_stop()],
                pass_fds=(read_end,), start_new_session=True,  # no terminal's Ctrl-C: it outlives us by design
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            os.close(read_end)

    def start(self) -> "PgServer":
        self._start_watchdog()  # before the server exists: no moment where a killed run leaves it behind
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server (again, after ``pause``) on its data directory."""
        options = (f"-c listen_addresses='' -k {self.socket_dir} -p {self.port} "
                   f"{'' if self.durable else '-c fsync=off '}-c max_connections=200 -c shared_buffers=32MB")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
                  "-o", options, "-w", "-t", "60", "start")
        self.started = True

    def pause(self) -> None:
        """Stop the server at once, as a crash would (every connection drops); its data stays for ``resume``."""
        self._run(*self._pg_ctl_stop())
        self.started = False

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{USER}@/{dbname}?host={self.socket_dir}&port={self.port}"

    def new_database(self) -> str:
        """A fresh, empty database; its DSN."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def __enter__(self) -> "PgServer":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        try:
            if self.started:
                self._run(*self._pg_ctl_stop())
        finally:
            self.started = False
            shutil.rmtree(self.root, ignore_errors=True)
            if self._lifeline is not None:
                os.close(self._lifeline)  # the watchdog finds nothing left to stop, and ends
                self._lifeline = None
            if self._watchdog is not None:
                self._watchdog.wait(timeout=60)
                self._watchdog = None


def _watchdog(read_end: int, root: Path, stop_argv: list[str]) -> None:
    """Wait until the process that started the server is gone, then stop the server it left."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while os.read(read_end, 4096):  # nothing is ever written: this returns b"" when the writer is gone
        pass
    if (root / "data" / "postmaster.pid").exists():
        subprocess.run(stop_argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120, cwd=root)
    shutil.rmtree(root, ignore_errors=True)


def run_with_server(argv: list[str]) -> int:
    """``[--durable] -- COMMAND...``: run COMMAND with ``RECKON_BENCH_DSN`` naming a private server's
    ``postgres`` database (the benchmarks create their own databases on it); its exit status."""
    durable = argv[:1] == ["--durable"]
    rest = argv[1:] if durable else argv
    if rest[:1] != ["--"] or len(rest) < 2:
        print("usage: python -m tests.pgserver [--durable] -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    with PgServer(durable=durable) as server:
        env = {**os.environ, "RECKON_BENCH_DSN": server.dsn()}
        try:
            return subprocess.run(rest[1:], env=env).returncode
        except KeyboardInterrupt:
            return 130
        except OSError as exc:
            print(f"tests.pgserver: cannot run {rest[1]}: {exc.strerror or exc}", file=sys.stderr)
            return 127


if __name__ == "__main__":
    if sys.argv[1:2] == ["--watchdog"]:
        _watchdog(int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])
    else:
        sys.exit(run_with_server(sys.argv[1:]))
