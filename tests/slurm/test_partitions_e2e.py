"""Partitions end to end (issue #22): a controller whose config file has two partitions, an agent in
each; jobs run only in their partition, a refusal is one line, the operator takes a partition down
at run time, and sinfo / scontrol / squeue show the real partitions."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import cluster, hang_guard, wait_for  # noqa: F401 (fixtures)
from tests.slurm.test_query_e2e import slurm

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

CONFIG = """
[partitions.cpu]
nodes = ["cpu[1-2]"]
default = true
default_time = "10m"
max_cpus_per_job = 2
[partitions.gpu]
nodes = "gpu*"
priority_tier = 2
"""


def test_two_partitions_on_two_agents(cluster):
    config = cluster.base / "reckon.toml"
    config.write_text(CONFIG)
    cluster.start_controller("--config", str(config))
    cluster.start_agent("cpu1", slots=2)
    cluster.start_agent("gpu1", slots=2)
    default = cluster.submit("true")
    on_gpu = cluster.cli("submit", "--partition", "gpu", "--", "true").strip()
    cluster.wait_jobs([default, on_gpu], ("COMPLETED",))
    jobs = cluster.jobs()
    assert (jobs[default]["agent"], jobs[default]["partition"], jobs[default]["time_limit"]) == ("cpu1", "cpu", 600)
    assert (jobs[on_gpu]["agent"], jobs[on_gpu]["partition"]) == ("gpu1", "gpu")
    assert "PARTITION" in cluster.cli("jobs").splitlines()[0]
    assert "invalid partition 'nope'" in cluster.one_line_reason(cluster.run("submit", "-p", "nope", "--", "true"))
    assert "partition cpu allows 2 per job" in cluster.one_line_reason(
        cluster.run("submit", "--slots", "3", "--", "true"))
    # The operator takes gpu down at run time: a job there stays PENDING with PartitionDown.
    assert "partition gpu set" in cluster.cli("partition", "set", "gpu", "state=down")
    held = cluster.cli("submit", "-p", "gpu", "--", "true").strip()
    shown = cluster.cli_json("show", held)
    assert shown["state"] == "PENDING" and "PartitionDown" in shown["pending_reason"]
    assert slurm(cluster, "sinfo", "-h", "-o", "%P %a %l %D %N").splitlines() == [
        "cpu* up infinite 1 cpu1", "gpu down infinite 1 gpu1"]
    assert slurm(cluster, "sinfo", "-h", "-o", "%P").split() == ["cpu*", "gpu"]  # Snakemake's call
    assert slurm(cluster, "squeue", "-h", "-o", "%i %P %r").split() == [held, "gpu", "PartitionDown"]
    part = slurm(cluster, "scontrol", "show", "partition", "cpu")
    assert "PartitionName=cpu" in part and "DefaultTime=10:00" in part and "Nodes=cpu1" in part
    cluster.cli("partition", "set", "gpu", "state=up")
    cluster.wait_job(held, ("COMPLETED",))
    assert cluster.job(held)["agent"] == "gpu1"
    nodes = cluster.nodes()
    assert (nodes["cpu1"]["partitions"], nodes["gpu1"]["partitions"]) == (["cpu"], ["gpu"])
