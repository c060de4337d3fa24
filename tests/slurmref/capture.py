"""Capture a real Slurm's output for the job shapes reckon's Slurm commands imitate (issue #21).

    make slurm-reference            # as root: installs Debian's slurm-wlm, runs this
    python -m tests.slurmref.capture [--keep] [--out tests/slurmref/golden]

What it does, in a private directory (/tmp/reckon-slurmref-*), removed at the end:

1. starts a munged with a key of its own, a MariaDB server on a free loopback port (its own
   data directory), slurmdbd, slurmctld and one slurmd: a cluster `reckonref` of one node
   `refnode` (this host, on 127.0.0.1; 8 CPUs and 4000 MiB as configured, whatever the machine
   has: SlurmdParameters=config_overrides) in one partition `debug`, select/cons_tres,
   proctrack/linuxproc (or cgroup, with task/cgroup, where cgroups allow it), accounting in
   slurmdbd (sacct needs it for finished jobs);
2. submits the shapes of shapes.py as root from a work directory, takes the `live` capture,
   waits for the jobs that end to end, takes the `final` capture (shapes.py's COMMANDS);
3. writes each command's output, normalised (normalise.py: job ids by shape name, times,
   durations, host names, the private directory, ports, pids), to golden/<phase>/<file>.txt:
   the first line is `$ ` and the command as run (ids as names), the rest is the output;
4. stops every daemon it started and removes the directory (``--keep`` keeps it, for a look).

Only the Slurm version the machine has is captured (Debian 12: 22.05.8); the version is in
golden/VERSION.  It needs root, apt and minutes (the `timeout` shape needs Slurm's minute
limit to pass): CI does not run it; the goldens are committed and test_against_slurm.py
compares reckon's commands with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.slurmref import normalise
from tests.slurmref.shapes import COMMANDS, NAMES, SHAPES

HERE = Path(__file__).resolve().parent
CLUSTER, NODE, PARTITION = "reckonref", "refnode", "debug"
DEADLINE = 240.0  # seconds for any one wait (the timeout shape needs Slurm's 1 minute + its timer)
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(what: str, predicate, timeout: float = DEADLINE, interval: float = 0.5, show=None):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = f"; last: {show()}" if show is not None else ""
            raise SystemExit(f"capture: timed out after {timeout:.0f}s waiting for {what}{seen}")
        time.sleep(interval)


def cgroups_usable() -> bool:
    """Slurm 22.05's cgroup/v1 plugin makes /sys/fs/cgroup/<controller>/slurm: can we?"""
    probe = Path("/sys/fs/cgroup/memory/reckon-slurmref-probe")
    try:
        probe.mkdir()
        (probe / "memory.limit_in_bytes").write_text("33554432")
        probe.rmdir()
        return Path("/sys/fs/cgroup/freezer").is_dir()
    except OSError:
        return False


class RefCluster:
    def __init__(self, root: Path, use_cgroups: bool) -> None:
        self.root = root
        self.etc = root / "etc"
        self.work = root / "work"
        self.use_cgroups = use_cgroups
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports = {k: free_port() for k in ("db", "dbd", "ctld", "slurmd")}
        self.env = {**os.environ, "SLURM_CONF": str(self.etc / "slurm.conf"), "TZ": "UTC"}
        for var in [v for v in self.env if v.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SACCT_", "SINFO_"))]:
            if var != "SLURM_CONF":
                del self.env[var]
        self.munge_socket = root / "munge" / "munge.socket"

    # ---- daemons -----------------------------------------------------------------

    def spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            env=self.env, start_new_session=True)
        log.close()

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"capture: {name} exited {proc.returncode}; see {self.root}/log/{name}*")
        return proc is not None

    def start(self) -> None:
        for d in ("etc", "work", "log", "munge", "db", "spool/ctld", "spool/d"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        self.work.chmod(0o777)
        self.start_munge()
        self.start_mariadb()
        self.write_conf()
        self.spawn("slurmdbd", ["slurmdbd", "-D", "-v"])
        wait("slurmdbd", lambda: self.alive("slurmdbd") and self.run(["sacctmgr", "-n", "list", "cluster"],
                                                                      check=False).returncode == 0)
        for argv in (["sacctmgr", "-i", "add", "cluster", CLUSTER],
                     ["sacctmgr", "-i", "add", "account", "refacct", f"cluster={CLUSTER}"],
                     ["sacctmgr", "-i", "add", "user", "root", "account=refacct", f"cluster={CLUSTER}"]):
            self.run(argv, check=False)
        self.spawn("slurmctld", ["slurmctld", "-D", "-i", "-v"])
        wait("slurmctld", lambda: self.alive("slurmctld") and self.run(["scontrol", "ping"], check=False)
             .stdout.count("UP") >= 1)
        self.spawn("slurmd", ["slurmd", "-D", "-N", NODE, "-v"])
        wait("the node idle", lambda: self.alive("slurmd") and "idle" in self.run(
            ["sinfo", "-h", "-o", "%t"]).stdout)

    def start_munge(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.spawn("munged", ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                              f"--key-file={key}", f"--pid-file={self.root / 'munge' / 'pid'}",
                              f"--log-file={self.root / 'log' / 'munged.log'}",
                              f"--seed-file={self.root / 'munge' / 'seed'}"])
        wait("munged", lambda: self.alive("munged") and self.munge_socket.exists())

    def start_mariadb(self) -> None:
        data = self.root / "db"
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                        "--auth-root-authentication-method=socket", "--skip-test-db"],
                       check=True, capture_output=True, env=self.env)
        sock = self.root / "db.sock"
        self.spawn("mariadbd", ["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={sock}",
                                f"--port={self.ports['db']}", "--bind-address=127.0.0.1", "--user=root",
                                f"--pid-file={self.root / 'db.pid'}", "--skip-log-bin",
                                "--innodb-buffer-pool-size=64M", "--innodb-lock-wait-timeout=900"])
        sql = ("CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmref';"
               "GRANT ALL ON *.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;")
        wait("mariadb", lambda: self.alive("mariadbd") and subprocess.run(
            ["mariadb", "--no-defaults", "-S", str(sock), "-u", "root", "-e", sql],
            capture_output=True).returncode == 0, interval=1)

    def write_conf(self) -> None:
        r, p = self.root, self.ports
        auth = f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\n"
        if self.use_cgroups:
            plugins = ("ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n"
                       "JobAcctGatherType=jobacct_gather/cgroup\n")
            (self.etc / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\n"
                                                  "ConstrainSwapSpace=yes\nAllowedSwapSpace=0\n")
        else:
            plugins = "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n" \
                      "JobAcctGatherType=jobacct_gather/linux\n"
        (self.etc / "slurm.conf").write_text(
            f"ClusterName={CLUSTER}\nSlurmctldHost={socket.gethostname()}(127.0.0.1)\n{auth}MailProg=/bin/true\n"
            f"SlurmUser=root\nSlurmdUser=root\nSlurmctldPort={p['ctld']}\nSlurmdPort={p['slurmd']}\n"
            f"StateSaveLocation={r}/spool/ctld\nSlurmdSpoolDir={r}/spool/d\n"
            f"SlurmctldPidFile={r}/slurmctld.pid\nSlurmdPidFile={r}/slurmd.pid\n"
            f"SlurmctldLogFile={r}/log/slurmctld.log\nSlurmdLogFile={r}/log/slurmd.log\n"
            f"SchedulerType=sched/backfill\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n"
            f"{plugins}SlurmdParameters=config_overrides\nReturnToService=2\nMpiDefault=none\n"
            f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
            f"AccountingStoragePort={p['dbd']}\nAccountingStoragePass={self.munge_socket}\nJobCompType=jobcomp/none\n"
            f"MinJobAge=3600\nKillWait=5\nInactiveLimit=0\nWaitTime=0\n"
            f"SchedulerParameters=sched_interval=2\n"
            f"NodeName={NODE} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 CPUs=8 "
            f"RealMemory=4000 State=UNKNOWN\nDefMemPerCPU=100\n"
            f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP\n")
        dbd = self.etc / "slurmdbd.conf"
        dbd.write_text(
            f"{auth}DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={p['dbd']}\nSlurmUser=root\n"
            f"LogFile={r}/log/slurmdbd.log\nPidFile={r}/slurmdbd.pid\n"
            f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={p['db']}\n"
            f"StorageUser=slurm\nStoragePass=slurmref\nStorageLoc=slurm_acct_db\n")
        dbd.chmod(0o600)

    def stop(self) -> None:
        if self.procs.get("slurmctld") is not None and self.procs["slurmctld"].poll() is None:
            self.run(["scancel", "--user=root"], check=False)  # slurmd's SIGTERM leaves jobs running
            try:
                wait("the jobs to stop", lambda: not self.run(["squeue", "-h", "-t", "running,completing"],
                                                              check=False).stdout.strip(), timeout=60)
            except SystemExit as exc:
                print(exc, file=sys.stderr)
        for name in reversed(DAEMONS):  # slurmd first, munged last
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # What slurmstepd may have left: processes whose cwd is ours, in our node's cgroups.
        groups = sorted(Path("/sys/fs/cgroup").glob(f"*/slurm_{NODE}/**/"), key=lambda p: -len(p.parts))
        for group in groups:
            try:
                for pid in (group / "cgroup.procs").read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        for pid_dir in Path("/proc").iterdir():
            if pid_dir.name.isdigit():
                try:
                    if os.readlink(pid_dir / "cwd").startswith(str(self.root)):
                        os.kill(int(pid_dir.name), signal.SIGKILL)
                except OSError:
                    pass
        for group in groups:
            try:
                wait(f"{group} to empty", lambda: not (group / "cgroup.procs").read_text().strip(), timeout=10,
                     interval=0.1)
                group.rmdir()
            except (OSError, SystemExit) as exc:
                print(f"capture: could not remove {group}: {exc}", file=sys.stderr)

    # ---- commands ------------------------------------------------------------------

    def run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=self.work, timeout=60)
        if check and result.returncode != 0:
            raise SystemExit(f"capture: {shlex.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def states(self) -> dict[str, list[str]]:
        """Shape name -> the states of its jobs (squeue, all states; an array: every member)."""
        out = self.run(["squeue", "-h", "-r", "--states=all", "-o", "%j %T"]).stdout
        found: dict[str, list[str]] = {}
        for line in out.splitlines():
            name, state = line.split()
            found.setdefault(name, []).append(state)
        return found


    def accounted(self, ids: dict[str, str], show: bool = False):
        """Does slurmdbd know what slurmctld knows (slurmctld sends it records asynchronously:
        before they arrive sacct shows a job's steps under a job called `allocation`)?"""
        def table(argv):
            rows = [ln.split("|") for ln in self.run(argv).stdout.splitlines()]
            return sorted((name, state.split()[0]) for name, state in rows)
        ctld = table(["squeue", "-h", "-r", "--states=all", "-o", "%j|%T", "-j", ",".join(ids.values())])
        dbd = table(["sacct", "-X", "-n", "-P", "-o", "JobName,State", "-j", ",".join(ids.values())])
        # An array's pending members are one line in sacct and one each in squeue -r.
        started = ([r for r in ctld if r[1] != "PENDING"], [r for r in dbd if r[1] != "PENDING"])
        return (ctld, dbd) if show else started[0] == started[1] and {r[0] for r in ctld} == {r[0] for r in dbd}


def submit(cluster: RefCluster, ids: dict[str, str], outputs: dict[str, str]) -> None:
    for shape in SHAPES:
        opts = [o.format(**ids) for o in shape.sbatch]
        argv = ["sbatch", f"--job-name={shape.name}", *opts, "--wrap", shape.wrap]
        out = cluster.run(argv).stdout
        job = out.strip().split()[-1].split(";")[0]
        ids[shape.name] = job
        if shape.name in ("completed", "failed"):
            outputs[f"sbatch-{shape.name}"] = f"$ {shlex.join(argv)}\n{out}"


def capture(cluster: RefCluster, phase: str, ids: dict[str, str], outputs: dict[str, str]) -> None:
    """Run the phase's commands; outputs["<phase>/<file>"] = what each printed (its status if not 0)."""
    fields = {**ids, "ids": ",".join(ids[n] for n in NAMES)}
    for command in COMMANDS:
        if phase in command.phases:
            result = cluster.run([a.format(**fields) for a in command.argv], check=False)
            outputs[f"{phase}/{command.file}"] = result.stdout + (
                f"[exit {result.returncode}] {result.stderr}" if result.returncode else "")


def write_goldens(out_dir: Path, outputs: dict[str, str], context: dict) -> None:
    """Normalise the outputs as the context (ids, hosts, directory, ports) says and write them:
    golden/<phase>/<file>.txt, the command (ids by shape name) on its first line."""
    norm = normalise.Normaliser(ids=context["ids"], hosts=tuple(context["hosts"]), dirs=(context["dir"],),
                                ports=tuple(context["ports"]))
    named = {**{n: "{" + n + "}" for n in NAMES}, "ids": ",".join("{" + n + "}" for n in NAMES)}
    if out_dir.exists():
        shutil.rmtree(out_dir)
    for command in COMMANDS:
        for phase in command.phases:
            lines = norm.output(outputs[f"{phase}/{command.file}"], command.kind, command.columns)
            shown = shlex.join(a.format(**named) for a in command.argv)
            (out_dir / phase).mkdir(parents=True, exist_ok=True)
            (out_dir / phase / f"{command.file}.txt").write_text("\n".join([f"$ {shown}", *lines]) + "\n")
    for name in ("completed", "failed"):
        argv, text = outputs[f"sbatch-{name}"].split("\n", 1)
        (out_dir / f"sbatch-{name}.txt").write_text("\n".join([norm.text(argv), *norm.output(text, "text")]) + "\n")
    (out_dir / "VERSION").write_text(context["version"] + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.slurmref.capture", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "golden")
    parser.add_argument("--keep", action="store_true", help="keep the private directory (the daemons stop)")
    parser.add_argument("--raw", type=Path, help="also write the outputs as they came, and context.json, here")
    parser.add_argument("--from-raw", type=Path, metavar="DIR",
                        help="no Slurm: normalise what --raw wrote into DIR again (after a change to normalise.py)")
    parser.add_argument("--no-cgroups", action="store_true", help="proctrack/linuxproc even where cgroups work")
    args = parser.parse_args(argv)
    if args.from_raw is not None:
        context = json.loads((args.from_raw / "context.json").read_text())
        outputs = {str(p.relative_to(args.from_raw))[:-4]: p.read_text().split("\n", 1)[1]
                   for p in args.from_raw.rglob("*.txt")}
        outputs.update({k: v for k, v in context["sbatch"].items()})
        write_goldens(args.out, outputs, context)
        print(f"capture: goldens in {args.out} from {args.from_raw}")
        return 0
    if os.geteuid() != 0:
        print("capture: run as root (it starts slurmctld, slurmd and slurmdbd)", file=sys.stderr)
        return 2
    missing = [d for d in DAEMONS + ("sbatch", "mariadb-install-db") if shutil.which(d) is None]
    if missing:
        print(f"capture: missing {', '.join(missing)}: `make slurm-reference` installs them", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="reckon-slurmref-"))
    cluster = RefCluster(root, use_cgroups=not args.no_cgroups and cgroups_usable())
    try:
        cluster.start()
        version = cluster.run(["sinfo", "--version"]).stdout.strip()
        ids: dict[str, str] = {}
        outputs: dict[str, str] = {}
        submit(cluster, ids, outputs)

        def live_ready() -> bool:
            states = cluster.states()
            return (all(states.get(s.name) and set(states[s.name]) <= set(s.live) for s in SHAPES
                        if s.name not in ("cancelled_pending", "oom"))
                    and states["array"].count("RUNNING") == 2)

        wait("the live shapes", live_ready, show=cluster.states)
        wait("accounting to catch up", lambda: cluster.accounted(ids), show=lambda: cluster.accounted(ids, True))
        cluster.run(["scancel", ids["cancelled_pending"]])
        wait("cancelled_pending cancelled", lambda: cluster.states().get("cancelled_pending") == ["CANCELLED"])
        capture(cluster, "live", ids, outputs)
        cluster.run(["scancel", ids["cancelled_running"]])

        def final_ready() -> bool:
            states = cluster.states()
            waiting = {"held", "dependent"}
            return all(set(v) <= set(normalise.TERMINAL) for k, v in states.items() if k not in waiting)

        wait("the jobs that end", final_ready, show=cluster.states)
        wait("accounting to catch up", lambda: cluster.accounted(ids), show=lambda: cluster.accounted(ids, True))
        capture(cluster, "final", ids, outputs)
        plugins = "proctrack/cgroup task/cgroup" if cluster.use_cgroups else "proctrack/linuxproc"
        context = {"ids": ids, "hosts": [NODE, socket.gethostname()], "dir": str(root),
                   "ports": [str(p) for p in cluster.ports.values()], "version": f"{version}\n{plugins}",
                   "sbatch": {k: v for k, v in outputs.items() if k.startswith("sbatch-")}}
        write_goldens(args.out, outputs, context)
        if args.raw is not None:
            for key, text in outputs.items():
                if not key.startswith("sbatch-"):
                    (args.raw / key).parent.mkdir(parents=True, exist_ok=True)
                    (args.raw / f"{key}.txt").write_text(f"$ {key}\n{text}")
            (args.raw / "context.json").write_text(json.dumps(context, indent=1) + "\n")
        print(f"capture: {version}, goldens in {args.out}")
        return 0
    finally:
        cluster.stop()
        if args.keep:
            print(f"capture: kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
