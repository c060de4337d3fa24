"""A cancel that reaches the agent while the job's launch is under way (issue #9, bug 2).

The agent launches in a background task and carries out kills inline; the
runner ignores a kill for an attempt it does not list as running yet.  Found
by hand: submit ``sleep 4`` and cancel at once, and the job ran to its end and
was recorded CANCELLED with exit code 0.  The kill must take effect whether it
arrives while the runner is launching (killed as soon as it runs) or before
the launch task has even begun (nothing is launched at all).
"""

from __future__ import annotations

import time as _time

import trio

from reckon.daemon.agent import daemon as agent_daemon
from reckon.daemon.agent.attempts import ExitStatus
from reckon.model import events as E
from reckon.model.jobs import JobSpec, JobState
from tests.daemon.test_agent_daemon import GUARD, install, options, start_agent
from tests.daemon.trio_harness import FakeNet, ManualRunner, controller, patch_controller, until

SLEEP = JobSpec(name="sleeper", command=("sleep", "4"))


class GatedLaunchRunner(ManualRunner):
    """``start()`` waits for ``gate`` (a slow launch); ``kill()`` acts, as the real
    ``JobRunner.kill`` does, only on attempts it lists as running: the process
    then ends by SIGTERM."""

    def __init__(self, state_dir=None) -> None:
        super().__init__(state_dir)
        self.gate = trio.Event()
        self.launching = trio.Event()
        self.starts: list[tuple[str, int]] = []
        self.kills: list[tuple[str, int]] = []

    async def start(self, job: str, attempt: int, spec: JobSpec, *, owner=None, gpus=()) -> float:
        self.starts.append((job, attempt))
        self.launching.set()
        await self.gate.wait()
        return await super().start(job, attempt, spec)

    async def kill(self, job: str, attempt: int, grace: float = 10.0) -> None:
        started_at = self.running.pop((job, attempt), None)
        if started_at is None:
            return  # not running here (yet): ignored, like JobRunner.kill
        self.kills.append((job, attempt))
        self._send_exit.send_nowait(ExitStatus(job=job, attempt=attempt, exit_code=None, signal=15,
                                               started_at=started_at, finished_at=started_at + 0.5))


async def test_a_cancel_during_the_launch_kills_the_job(tmp_path, autojump_clock, monkeypatch):
    with trio.fail_after(GUARD):
        async with controller(tmp_path / "controller") as ctl:
            net = FakeNet(ctl.nursery, server=ctl.daemon)
            wall = install(monkeypatch, net)
            patch_controller(monkeypatch, "time", wall)
            monkeypatch.setattr(agent_daemon, "NullRunner", GatedLaunchRunner)
            net.up = True
            agent, _, _ = await start_agent(ctl.nursery, options(tmp_path / "agent"))
            await agent.joined.wait()
            runner: GatedLaunchRunner = agent.runner

            job = await ctl.submit(SLEEP)
            await runner.launching.wait()  # the launch is under way ...
            await ctl.daemon.call(event=E.CancelJob(job=job, now=_time.time()))  # ... and the cancel comes
            sent = ctl.daemon.model.sessions["n1"].seq  # the Kill is the controller's latest message
            await until(lambda: agent.model.seen_seq >= sent)  # the agent has handled it; start() still held
            assert not runner.gate.is_set()
            runner.gate.set()  # the launch completes
            await until(lambda: ctl.job(job).state is not JobState.RUNNING)

            assert runner.kills == [(job, 1)]
            record = ctl.job(job)
            assert (record.state, record.exit_code, record.signal) == (JobState.CANCELLED, None, 15)
            ctl.nursery.cancel_scope.cancel()


async def test_a_kill_before_the_launch_task_runs_launches_nothing(tmp_path, autojump_clock, monkeypatch):
    """StartProcess and KillProcess executed in one batch: the launch task has not run
    when the kill is carried out.  Nothing may be launched, and the model is told the
    attempt has no process (never an invented outcome)."""
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            net = FakeNet(nursery)
            install(monkeypatch, net)
            monkeypatch.setattr(agent_daemon, "NullRunner", GatedLaunchRunner)
            agent, _, _ = await start_agent(nursery, options(tmp_path / "agent"))
            runner: GatedLaunchRunner = agent.runner
            runner.gate.set()
            told: list = []
            agent.feed = lambda event, conn=None: _record(told, event)  # type: ignore[method-assign]

            await agent._execute([(E.StartProcess(job="1", attempt=1, spec=SLEEP), None),
                                  (E.KillProcess(job="1", attempt=1), None)], nursery)
            await until(lambda: told)
            assert runner.starts == [] and runner.running == {}
            assert [type(e) for e in told] == [E.ProcessLost]
            assert agent._launching == {}
            nursery.cancel_scope.cancel()


async def _record(told: list, event) -> None:
    told.append(event)
