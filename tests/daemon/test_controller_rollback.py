"""Issue #9 bug 3 end to end in the real daemons: the controller's state
directory is rolled back to an earlier copy while an agent still runs a job
of the lost history, and a new job reuses that job's id.

The real ControllerDaemon (restarted from disk three times) and the real
agent daemon with its real AgentStore talk over the in-memory network of
trio_harness; the runner is the test's (it owns which processes run, and a
kill ends a process by SIGKILL).  INV-OUTCOME-OWNER.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

from reckon.daemon.agent import daemon as agent_daemon
from reckon.daemon.agent.attempts import AlreadyLaunched, ExitStatus, check_key
from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.jobs import JobState
from reckon.model.id_marks import ID_BLOCK
from tests.daemon.test_agent_daemon import install, options, start_agent
from tests.daemon.trio_harness import FakeNet, ManualRunner, controller, patch_controller, until

GUARD = 1_000  # fake seconds


class KillingRunner(ManualRunner):
    """ManualRunner whose kill ends the process at once, by SIGKILL, and is remembered.

    ``leftover``: attempts whose output files the old history left on disk (the
    real runner's ``.stdout`` claim exists): launching them runs nothing.
    """

    leftover: frozenset[tuple[str, int]] = frozenset()

    def __init__(self, state_dir=None) -> None:
        super().__init__(state_dir)
        self.kills: list[tuple[str, int]] = []
        self.launches: list[tuple[str, int]] = []  # every start asked for, launched or not

    async def start(self, job, attempt, spec, *, owner=None, gpus=()):
        self.launches.append((job, attempt))
        if (job, attempt) in self.leftover:
            raise AlreadyLaunched(f"{job}.{attempt} was launched before ({job}.{attempt}.stdout exists)")
        return await super().start(job, attempt, spec)

    async def kill(self, job: str, attempt: int, grace: float = 10.0) -> None:
        check_key(job, attempt)
        self.kills.append((job, attempt))
        started_at = self.running.pop((job, attempt), None)
        if started_at is not None:
            self._send_exit.send_nowait(ExitStatus(job=job, attempt=attempt, exit_code=None, signal=9,
                                                   started_at=started_at, finished_at=started_at + 1.0))


def _copy_state(src: Path, dst: Path) -> None:
    """Copy controller.db* (the database, its WAL and shared memory) and the id-mark file: a
    restore of the whole directory, the one case where an id can be issued again (README)."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in [*dst.glob("controller.db*"), *dst.glob("id-mark")]:
        path.unlink()
    for path in [*src.glob("controller.db*"), *src.glob("id-mark")]:
        shutil.copy2(path, dst / path.name)


async def _leave(net: FakeNet, agent) -> None:
    """The controller goes away (its host is stopped): the agent sees its connection drop."""
    net.up = False
    await net.cut()
    await until(lambda: agent.model.session.value == "disconnected")


@pytest.mark.parametrize("leftover", [(), (2,), (2, 3)], ids=["no-leftover-files", "files-of-attempt-2",
                                                               "files-of-attempts-2-3"])
async def test_rolled_back_controller_never_gives_an_old_process_outcome_to_a_new_job(
        tmp_path, autojump_clock, monkeypatch, leftover):
    """``leftover``: attempts of the reused id whose files the old history left: each is
    tried once, runs nothing, and is requeued; the job then runs once, under the next attempt."""
    state, backup, agent_state = tmp_path / "controller", tmp_path / "backup", tmp_path / "agent"
    # The job of step 2 is the first id of the second block: each start continues above the id mark.
    monkeypatch.setattr(KillingRunner, "leftover", frozenset((str(ID_BLOCK + 1), a) for a in leftover))
    ours = 2 + len(leftover)  # the attempt that runs: 1 is refused, each leftover one is lost
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as outer:
            net = FakeNet(outer)
            wall = install(monkeypatch, net)
            patch_controller(monkeypatch, "time", wall)
            monkeypatch.setattr(agent_daemon, "NullRunner", KillingRunner)

            # 1. A new history; the agent joins it.  The operator's backup is taken here.
            async with controller(state) as ctl:
                net.server, net.up = ctl.daemon, True
                agent, scope, stopped = await start_agent(outer, options(agent_state))
                await agent.joined.wait()
                await _leave(net, agent)
                ctl.nursery.cancel_scope.cancel()
            _copy_state(state, backup)
            runner: KillingRunner = agent.runner

            # 2. Job 1 is submitted and runs on the agent; the controller then stops.
            async with controller(state) as ctl:
                net.server, net.up = ctl.daemon, True
                old = await ctl.submit()
                await until(lambda: (old, 1) in runner.running and ctl.job(old).started_at is not None)
                old_uid = ctl.job(old).uid
                await _leave(net, agent)
                ctl.nursery.cancel_scope.cancel()

            # 3. The operator restores the backup; a new job is submitted before the
            #    agent is back: the restored history issues the same id again.
            _copy_state(backup, state)
            async with controller(state) as ctl:
                assert old not in ctl.daemon.model.state.jobs
                new = await ctl.submit()
                assert new == old and ctl.job(new).uid != old_uid
                net.server, net.up = ctl.daemon, True

                # The old process is killed; the new job runs a process of its own
                # (under a new attempt: the agent refuses the old attempt number).
                await until(lambda: (old, 1) in runner.kills and (new, ours) in runner.running)
                runner.finish(new, ours, exit_code=3, finished_at=1_650_000_000.5)
                await until(lambda: ctl.job(new).state is JobState.FAILED)
                record = ctl.job(new)
                assert (record.attempt, record.exit_code, record.signal, record.finished_at) == (
                    ours, 3, None, 1_650_000_000.5)
                # Each attempt was tried at most once ((1, 1) is the old submission's own launch:
                # the refused dispatch launched nothing); only the last one ran anything.
                tried = [key for key in runner.launches if key[0] == new]
                assert tried == [(new, 1)] + [(new, a) for a in range(2, ours + 1)] and (new, 1) not in tried[1:]

                durable = await ctl.store.durable()
                finished = [f for f in durable if isinstance(f, F.JobFinished)]
                assert [(f.job, f.attempt, f.exit_code, f.signal) for f in finished] == [(new, ours, 3, None)]
                assert not any(isinstance(f, F.JobAdopted) for f in durable)
                requeued = [f for f in durable if isinstance(f, F.JobRequeued)]
                assert [(f.job, f.attempt) for f in requeued] == [(new, a) for a in range(1, ours)]
                assert "refused" in requeued[0].reason
                # The old process's own outcome reached the controller and was refused as another's.
                await until(lambda: agent.model.outbox == {})

                # Quiet now: heartbeats agree and arm no more rounds.
                reports_before = sum(isinstance(e, E.MessageFromAgent) and isinstance(e.message, M.ResyncReport)
                                     for e in ctl.events)
                await trio.sleep(60)
                reports_after = sum(isinstance(e, E.MessageFromAgent) and isinstance(e.message, M.ResyncReport)
                                    for e in ctl.events)
                assert reports_after == reports_before
                assert ctl.node("n1") == "IDLE"

                # A later submit gets a fresh id.
                assert await ctl.submit() == str(int(new) + 1)
                scope.cancel()
                await stopped.wait()
                ctl.nursery.cancel_scope.cancel()
