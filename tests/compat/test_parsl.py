"""Parsl (parsl/providers/slurm/slurm.py) on reckon: a HighThroughputExecutor whose one block is a
SlurmProvider job (`sbatch FILE`, `--exclusive` by default, `sacct -X --noheader
--format=jobid,state%20 --job 'IDS'` for its status), a few python apps run in it, and the block
cancelled (`scancel`) at cleanup."""

from __future__ import annotations

import parsl
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.providers import SlurmProvider


@parsl.python_app
def double(x: int) -> int:
    return 2 * x


def test_parsl_slurmprovider_htex_apps(slurm):
    slurm.start()
    provider = SlurmProvider(nodes_per_block=1, init_blocks=1, min_blocks=1, max_blocks=1,
                             walltime="00:10:00", cmd_timeout=60)
    htex = HighThroughputExecutor(label="reckon", address="127.0.0.1", max_workers_per_node=2,
                                  provider=provider)
    dfk = parsl.load(Config(executors=[htex], run_dir=str(slurm.work / "runinfo"), strategy="none"))
    try:
        assert provider._cmd.startswith("sacct"), "Parsl takes sacct when `sacct -X` exits 0"
        assert [f.result(timeout=180) for f in [double(i) for i in range(5)]] == [0, 2, 4, 6, 8]
        ids = sorted(provider.resources)
        statuses = provider.status(ids)
        assert [s.state.name for s in statuses] == ["RUNNING"], statuses
    finally:
        dfk.cleanup()
        parsl.clear()
    assert len(ids) == 1

    recorded = slurm.wait_terminal(ids)
    assert set(recorded) == set(ids), "reckon recorded exactly Parsl's block"
    assert recorded[ids[0]]["name"].startswith("parsl.reckon.block-0."), recorded[ids[0]]
    assert recorded[ids[0]]["state"] == "CANCELLED", recorded[ids[0]]
