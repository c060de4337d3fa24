"""submitit (submitit/slurm/slurm.py) on reckon: a function, `map_array` of a function (a Slurm
array with `%` throttle), and a checkpointable job whose time limit comes: `--signal=USR2@S`
reaches the Python process under `srun`, submitit's handler checkpoints and calls
`scontrol requeue ID`, and the next attempt finishes.  submitit finds its results in pickles, and
its state through `sacct -o JobID,State,NodeList --parsable2 -j ID`: both are checked."""

from __future__ import annotations

import time

import submitit

from tests.compat.site import until


def add(a: int, b: int) -> int:
    return a + b


def square(x: int) -> int:
    return x * x


class SlowUntilRequeued(submitit.helpers.Checkpointable):
    """Its first run waits for the time limit's warning; submitit checkpoints it (pickling
    ``runs``) and requeues it; the second run returns at once."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, value: int) -> tuple[int, int]:
        self.runs += 1
        if self.runs == 1:
            time.sleep(600)  # USR2 comes ~10 s in; submitit's handler exits after requeueing
        return value, self.runs


def executor(slurm, **params) -> submitit.AutoExecutor:
    ex = submitit.AutoExecutor(folder=slurm.work / "submitit" / "%j")
    assert ex.cluster == "slurm", "submitit picks Slurm when srun is on PATH"
    ex.update_parameters(timeout_min=5, mem_gb=1, cpus_per_task=1, name="compat", **params)
    return ex


def state(job) -> str:
    return job.watcher.get_state(job.job_id, mode="force")


def test_submitit_function_array_and_requeue(slurm):
    slurm.start()

    # A function.
    ex = executor(slurm)
    job = ex.submit(add, 2, 3)
    assert job.result() == 5
    until(lambda: state(job) == "COMPLETED", what=f"sacct showing {job.job_id} COMPLETED")

    # An array of functions (#SBATCH --array=0-3%2).
    ex = executor(slurm, slurm_array_parallelism=2)
    jobs = ex.map_array(square, [1, 2, 3, 4])
    assert len({j.job_id.split("_")[0] for j in jobs}) == 1
    assert [j.result() for j in jobs] == [1, 4, 9, 16]
    until(lambda: all(state(j) == "COMPLETED" for j in jobs), what="sacct showing the array COMPLETED")

    # Checkpoint and requeue on the time limit's warning: --time=1 (minute), USR2 50 s before.
    ex = executor(slurm, slurm_signal_delay_s=50)
    ex.update_parameters(timeout_min=1)
    requeued = ex.submit(SlowUntilRequeued(), 7)
    assert requeued.result() == (7, 2)
    # srun expanded submitit's %j/%A_%a/%t log names (Slurm's %a: the array index, not reckon's attempt).
    assert "Caught signal SIGUSR2" in (requeued.stderr() or "")
    assert all(j.paths.stdout.exists() for j in jobs), [str(j.paths.stdout) for j in jobs]

    ids = [job.job_id, *(j.job_id for j in jobs), requeued.job_id]
    recorded = slurm.wait_terminal(ids)
    assert set(recorded) == set(ids), "reckon recorded exactly submitit's jobs"
    assert all(recorded[i]["state"] == "COMPLETED" for i in ids), {i: recorded[i]["state"] for i in ids}
    again = recorded[requeued.job_id]
    assert (again["attempt"], again["requeues"]) == (2, 1), again
    assert all(recorded[i]["requeues"] == 0 for i in ids[:-1])
