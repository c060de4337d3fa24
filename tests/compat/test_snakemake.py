"""Snakemake 9 with snakemake-executor-plugin-slurm on reckon: a three-rule chain, each rule a job
(`sbatch --parsable --job-name RUN_UUID --output LOG --export=ALL --comment rule_X ... --wrap=...`),
which runs `srun -n1 --cpu-bind=q ... snakemake` inside itself (the slurm-jobstep executor), and
whose state the plugin reads with `sacct -X --parsable2 --noheader --format=JobIdRaw,State
--starttime ... --endtime now --name RUN_UUID`."""

from __future__ import annotations

import subprocess
import sys

SNAKEFILE = """\
localrules: all

rule all:
    input: "c.txt"

rule a:
    output: "a.txt"
    shell: "echo a > {output}"

rule b:
    input: "a.txt"
    output: "b.txt"
    shell: "cat {input} > {output}; echo b >> {output}"

rule c:
    input: "b.txt"
    output: "c.txt"
    shell: "cat {input} > {output}; echo c >> {output}"
"""


def test_snakemake_slurm_plugin_three_rules(slurm):
    slurm.start()
    flow = slurm.work / "flow"
    flow.mkdir()
    (flow / "Snakefile").write_text(SNAKEFILE)
    # As a user runs it; only the first status check comes sooner than the plugin's 40 s.
    argv = [sys.executable, "-m", "snakemake", "--executor", "slurm", "--jobs", "2",
            "--slurm-init-seconds-before-status-checks", "1", "--latency-wait", "10"]
    result = subprocess.run(argv, cwd=flow, capture_output=True, text=True, timeout=280,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"snakemake exited {result.returncode}:\n{result.stderr[-6000:]}"
    assert (flow / "c.txt").read_text() == "a\nb\nc\n"

    jobs = slurm.jobs()
    assert len(jobs) == 3, f"reckon recorded one job per rule, not {sorted(jobs)}"
    assert {j["state"] for j in jobs.values()} == {"COMPLETED"}, jobs
    assert len({j["name"] for j in jobs.values()}) == 1, "every job is named after the run's uuid"
    comments = sorted(j.get("labels", {}).get("comment") for j in jobs.values())
    assert comments == ["rule_a", "rule_b", "rule_c"], comments
