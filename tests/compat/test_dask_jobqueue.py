"""dask-jobqueue (dask_jobqueue/slurm.py) on reckon: a SLURMCluster scaled to two workers, each an
`sbatch` job (`#SBATCH -J -e -o -n 1 --cpus-per-task= --mem= -t`, logs named with `%J`), a sum
computed on them, and the cluster closed (`scancel` of each job)."""

from __future__ import annotations

from dask_jobqueue import SLURMCluster
from distributed import Client

from tests.compat.site import until


def test_dask_slurmcluster_two_workers_sum(slurm):
    slurm.start()
    logs = slurm.work / "dask-logs"
    cluster = SLURMCluster(cores=1, processes=1, memory="1GB", walltime="00:10:00", interface="lo",
                           log_directory=str(logs))
    try:
        cluster.scale(jobs=2)
        with Client(cluster) as client:
            client.wait_for_workers(2, timeout=120)
            total = client.submit(sum, client.map(lambda x: x * x, range(10))).result(timeout=60)
            assert total == 285
            ids = sorted(job.job_id for job in cluster.workers.values())
    finally:
        cluster.close()
    assert len(ids) == 2

    recorded = slurm.wait_terminal(ids)
    assert set(recorded) == set(ids), "reckon recorded exactly the cluster's jobs"
    for i in ids:
        assert recorded[i]["name"] == "dask-worker", recorded[i]
        assert recorded[i]["state"] == "CANCELLED", recorded[i]  # closed by scancel, as on Slurm
    # -e/-o name the logs worker-%J: Slurm's %J (job.step) is the job id for a batch script.
    until(lambda: all((logs / f"dask-worker-{i}.err").exists() for i in ids), what="the workers' logs")
