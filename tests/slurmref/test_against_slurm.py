"""reckon's Slurm commands against Slurm's own output (issue #21): the job shapes of shapes.py
run on a real reckon controller and agent (`refnode`, 8 slots, 4000 MiB, as the reference
node), through the executables `reckon slurm-commands DIR` writes, in the same two phases as
capture.py; each command's output, normalised the same way (normalise.py), is compared with
golden/<phase>/<file>.txt (compare.py).  A mismatch KNOWN_DIFFERENCES does not excuse fails
the test; all of them, excused or not, are printed.

Marked `long` (a minute and a half: the `timeout` shape needs its one-minute limit to pass).
Skips, saying why, where reckon has no `slurm-commands` (an older checkout).
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import HANG, Cluster, _tail, hermetic_env, wait_for
from tests.slurmref import compare, normalise
from tests.slurmref.shapes import COMMANDS, NAMES, SHAPES

pytestmark = [pytest.mark.long, pytest.mark.xdist_group("e2e")]

GOLDEN = Path(__file__).resolve().parent / "golden"
NODE = "refnode"
TIMEOUT_WAIT = 150.0  # the timeout shape: its 1 minute, the agent's kill grace, the report

# Mismatch pattern (fnmatch on compare.py's line) -> why reckon differs on purpose.  Each
# reason is one the lead has accepted; anything else is a bug in reckon's commands.
KNOWN_DIFFERENCES: dict[str, str] = {
    "*/scontrol-show-config: record 1: missing *": "reckon prints only the keys workflow tools read "
                                                  "(Snakemake's plugin), not Slurm's hundreds",
}


@pytest.fixture
def refcluster(tmp_path: Path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        leftovers = c.close()
        for log in sorted(tmp_path.glob("*.log")):
            print(f"----- {log.name} (last lines) -----\n{_tail(log)}")
        if leftovers:
            print("killed at teardown:", *leftovers, sep="\n  ")


class SlurmCommands:
    """reckon's Slurm executables in ``bin``, run as a user would: PATH, the controller's URL, a
    work directory; what they print normalised with the ids of this run."""

    def __init__(self, cluster: Cluster, bin_dir: Path, work: Path) -> None:
        self.cluster, self.bin, self.work = cluster, bin_dir, work
        self.env = hermetic_env(RECKON_CONTROLLER=cluster.url, TZ="UTC",
                                PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        for var in [v for v in self.env if v.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SACCT_", "SINFO_"))]:
            del self.env[var]

    def run(self, argv: list[str]) -> subprocess.CompletedProcess:
        exe = self.bin / argv[0]
        return subprocess.run([str(exe), *argv[1:]], capture_output=True, text=True, env=self.env,
                              cwd=self.work, timeout=HANG, stdin=subprocess.DEVNULL)

    def ok(self, argv: list[str]) -> str:
        result = self.run(argv)
        assert result.returncode == 0, f"{shlex.join(argv)} exited {result.returncode}: {result.stderr.strip()}"
        return result.stdout


def states(cluster: Cluster) -> dict[str, list[str]]:
    """Shape name -> its jobs' states, from reckon's own `jobs --expand` (not the commands under test)."""
    found: dict[str, list[str]] = {}
    for job in cluster.cli_json("jobs", "--expand"):
        found.setdefault(str(job.get("name") or ""), []).append(job["state"])
    return found


def test_reckons_slurm_commands_print_what_slurm_prints(refcluster: Cluster, tmp_path: Path):
    if not (GOLDEN / "VERSION").exists():
        pytest.skip("no goldens: run `make slurm-reference` as root")
    bin_dir = tmp_path / "slurm-bin"
    made = refcluster.run("slurm-commands", str(bin_dir))
    if made.returncode != 0 or not (bin_dir / "sbatch").exists():
        pytest.skip(f"this reckon has no `reckon slurm-commands`: {made.stderr.strip()[:120]}")
    work = tmp_path / "work"
    work.mkdir()
    refcluster.start_controller()
    refcluster.start_agent(NODE, "--mem", "4000M", "--no-cgroups", "--allow-root-jobs", "--kill-grace", "5",
                           slots=8)
    slurm = SlurmCommands(refcluster, bin_dir, work)

    ids: dict[str, str] = {}
    sbatch_out: dict[str, list[str]] = {}
    for shape in SHAPES:
        argv = ["sbatch", f"--job-name={shape.name}", *(o.format(**ids) for o in shape.sbatch), "--wrap", shape.wrap]
        out = slurm.ok(argv)
        ids[shape.name] = out.strip().split()[-1].split(";")[0]
        sbatch_out[shape.name] = out.splitlines()
    norm = normalise.Normaliser(ids=ids, hosts=(NODE, socket.gethostname()), dirs=(str(tmp_path),),
                                ports=(str(refcluster.port),))

    def live_ready() -> bool:  # as capture.py's, but reckon's states are fewer (no TIMEOUT, no OUT_OF_MEMORY)
        found = states(refcluster)
        return (all(found.get(s.name) and set(found[s.name]) <= set(s.live) for s in SHAPES
                    if s.name not in ("cancelled_pending", "oom"))
                and found.get("array", []).count("RUNNING") == 2
                and set(found.get("oom", ["RUNNING"])) <= set(normalise.TERMINAL))

    wait_for(live_ready, timeout=60, interval=0.5, what="the live shapes")
    slurm.ok(["scancel", ids["cancelled_pending"]])
    wait_for(lambda: states(refcluster).get("cancelled_pending") == ["CANCELLED"], what="cancelled_pending")
    mismatches = check_phase(slurm, "live", ids, norm)
    slurm.ok(["scancel", ids["cancelled_running"]])

    def final_ready() -> bool:
        found = states(refcluster)
        return all(set(v) <= set(normalise.TERMINAL) for k, v in found.items() if k not in ("held", "dependent"))

    wait_for(final_ready, timeout=TIMEOUT_WAIT, interval=1, what="the jobs that end")
    mismatches += check_phase(slurm, "final", ids, norm)
    for name, lines in sbatch_out.items():
        golden = GOLDEN / f"sbatch-{name}.txt"
        if golden.exists():
            _, want = compare.read_golden(golden)
            mismatches += compare.compare(f"sbatch-{name}", "text", norm.output("\n".join(lines), "text"), want)

    left = compare.unexplained(mismatches, KNOWN_DIFFERENCES)
    print(f"{len(mismatches)} differences from Slurm, {len(mismatches) - len(left)} known:", *mismatches, sep="\n  ")
    report = os.environ.get("RECKON_SLURMREF_REPORT")
    if report:  # the whole list, for whoever fixes the commands
        Path(report).write_text("\n".join(mismatches) + "\n")
    assert not left, f"{len(left)} differences from Slurm 22.05 nobody has explained:\n" + "\n".join(left)


def check_phase(slurm: SlurmCommands, phase: str, ids: dict[str, str], norm: normalise.Normaliser) -> list[str]:
    fields = {**ids, "ids": ",".join(ids[n] for n in NAMES)}
    out: list[str] = []
    for command in COMMANDS:
        golden = GOLDEN / phase / f"{command.file}.txt"
        if phase not in command.phases or not golden.exists():
            continue
        argv = [a.format(**fields) for a in command.argv]
        result = slurm.run(argv)
        text = result.stdout + (f"[exit {result.returncode}] {result.stderr}" if result.returncode else "")
        _, want = compare.read_golden(golden)
        out += compare.compare(f"{phase}/{command.file}", command.kind,
                               norm.output(text, command.kind, command.columns), want, command.columns)
    return out
