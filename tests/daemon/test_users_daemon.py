"""Users in the controller daemon (issue #20): the caller reaches every client operation.

The authenticated caller (daemon/auth/, MUNGE) is handed to ``_client_connection(ws, caller)``,
which passes it to ``_client_op``; these tests call ``_client_op`` with a caller as that path does.
A refused operation is the model's one line (PermissionDenied, a LocalProtocolError through the core loop) and changes nothing; ``logs`` is
checked in the daemon (daemon/controller/logs.py) with the same rule; ``history --user --since``
and ``jobs --user`` filter by owner.
"""

from __future__ import annotations

import time

import pytest
import trio
from trio_websocket import ConnectionClosed as WSClosed

from reckon.daemon import wire

from reckon.model import messages as M
from reckon.model.errors import LocalProtocolError
from reckon.model.output import OutputStatus
from reckon.model.permissions import Caller
from tests.daemon.trio_harness import SPEC, controller

GUARD = 1_000  # fake seconds
ALICE = Caller(uid=1001, gid=1001, user="alice")
BOB = Caller(uid=1002, gid=1002, user="bob")
OPERATOR = Caller(uid=0, gid=0, user="root", operator=True)


async def submit(ctl, caller: Caller | None) -> str:
    reply = await ctl.daemon._client_op({"op": "submit", "spec": SPEC.to_dict(), "queue_anyway": True}, caller)
    return reply["job"]["id"]


async def test_the_caller_owns_what_it_submits_and_others_are_refused(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path) as ctl:
            op = ctl.daemon._client_op
            job = await submit(ctl, ALICE)
            assert ctl.job(job).owner == ALICE.owner()
            [array] = [(await op({"op": "submit_array", "spec": SPEC.to_dict(), "array": "0-1",
                                  "queue_anyway": True}, BOB))["array"]]
            many = (await op({"op": "submit_many", "specs": [SPEC.to_dict()], "queue_anyway": True}, BOB))["jobs"]
            assert {ctl.job(j).owner.user for j in [array, *many]} == {"bob"}
            facts = ctl.daemon.store.last_seq
            for request in ({"op": "cancel", "job": job}, {"op": "hold", "job": job}, {"op": "requeue", "job": job}):
                with pytest.raises(LocalProtocolError, match=f"job {job} belongs to alice: bob may not"):
                    await op(request, BOB)
            with pytest.raises(LocalProtocolError, match=f"job {array} belongs to bob: alice may not cancel it"):
                await op({"op": "cancel", "job": array}, ALICE)
            assert ctl.daemon.store.last_seq == facts  # nothing was recorded
            await op({"op": "hold", "job": job}, ALICE)
            await op({"op": "release", "job": job}, OPERATOR)
            reply = await op({"op": "cancel", "job": job}, OPERATOR)
            assert reply["job"]["state"] == "CANCELLED" and reply["job"]["user"] == "alice"


async def test_only_operators_drain_and_resume(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path) as ctl:
            agent, _ = await ctl.join("n1")
            await agent.expect(M.Welcome)
            with pytest.raises(LocalProtocolError, match="only an operator may drain agent n1: alice is not one"):
                await ctl.daemon._client_op({"op": "drain", "agent": "n1"}, ALICE)
            with pytest.raises(LocalProtocolError, match="only an operator may forget agent n1: alice is not one"):
                await ctl.daemon._client_op({"op": "forget", "agent": "n1"}, ALICE)
            assert (await ctl.daemon._client_op({"op": "drain", "agent": "n1"}, OPERATOR))["changed"]
            assert (await ctl.daemon._client_op({"op": "resume", "agent": "n1"}, None))["changed"]  # token mode


async def test_logs_are_the_owners_and_the_operators(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=500) as ctl:
            agent, _ = await ctl.connect()
            await agent.send(M.Join(agent="n1", slots=1, version=M.PROTOCOL_VERSION, running=0))
            await agent.expect(M.Welcome)
            job = await submit(ctl, ALICE)
            dispatch = await agent.expect(M.Dispatch)
            assert dispatch.owner == ALICE.owner()  # the agent learns whom to run it as
            await agent.send(M.Started(job=job, attempt=1, started_at=1_700_000_000.0, uid=dispatch.uid))
            await ctl.sync()
            with pytest.raises(LocalProtocolError, match=f"job {job} belongs to alice: bob may not read it"):
                await ctl.daemon._client_op({"op": "logs", "job": job}, BOB)
            assert not agent.pending()  # refused before the agent was asked

            async def read_as(caller: Caller) -> dict:
                async with trio.open_nursery() as nursery:
                    result: dict = {}

                    async def ask() -> None:
                        result.update(await ctl.daemon._client_op({"op": "logs", "job": job}, caller))

                    nursery.start_soon(ask)
                    read = await agent.expect(M.OutputRead)
                    await agent.send(M.OutputChunk(request=read.request, status=OutputStatus.DATA, data=b"hi",
                                                   size=2, path="/x"))
                return result

            assert (await read_as(ALICE))["data"] == b"hi"
            assert (await read_as(OPERATOR))["data"] == b"hi"


async def test_jobs_and_history_by_user_since(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path) as ctl:
            op = ctl.daemon._client_op
            old, mine, theirs, tokens = (await submit(ctl, ALICE), await submit(ctl, ALICE), await submit(ctl, BOB),
                                         await submit(ctl, None))
            listed = (await op({"op": "jobs", "user": "alice"}, BOB))["jobs"]  # everyone sees the queue
            assert [j["id"] for j in listed] == [old, mine] and {j["user"] for j in listed} == {"alice"}
            await op({"op": "cancel", "job": old}, ALICE)
            for job, caller in ((mine, ALICE), (theirs, BOB), (tokens, OPERATOR)):
                await op({"op": "cancel", "job": job}, caller)
            history = (await op({"op": "history", "user": "alice"}, BOB))["jobs"]
            assert [j["id"] for j in history] == [old, mine]
            hour_ago, in_an_hour = time.time() - 3600, time.time() + 3600
            assert [j["id"] for j in (await op({"op": "history", "user": "alice", "since": hour_ago}, ALICE))["jobs"]
                    ] == [old, mine]
            assert (await op({"op": "history", "user": "alice", "since": in_an_hour}, ALICE))["jobs"] == []
            assert [j["id"] for j in (await op({"op": "history"}, None))["jobs"]] == [old, mine, theirs, tokens]
            with pytest.raises(ValueError, match="since must be a time"):
                await op({"op": "history", "since": "yesterday"}, None)


async def test_status_shows_the_per_user_limits(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path) as ctl:
            status = (await ctl.daemon._client_op({"op": "status"}, None))["status"]
            assert status["limits"] == {"max_running_per_user": None, "max_cpus_per_user": None}
            assert status["default_mem_per_cpu"] is None


class ScriptedSocket:
    """Just what ``_client_connection`` uses of a WebSocket: requests in, replies out, then closed."""

    def __init__(self, *requests: dict) -> None:
        self.requests = [wire.dumps(r) for r in requests]
        self.replies: list[dict] = []

    async def get_message(self) -> bytes:
        if not self.requests:
            raise WSClosed(None)
        return self.requests.pop(0)

    async def send_message(self, data: bytes) -> None:
        self.replies.append(wire.loads(data, limit=wire.MAX_CLIENT_MESSAGE))


async def test_the_connection_passes_its_caller_into_every_request(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path) as ctl:
            job = await submit(ctl, ALICE)
            ws = ScriptedSocket({"op": "cancel", "job": job}, {"op": "submit", "spec": SPEC.to_dict(),
                                                               "queue_anyway": True})
            await ctl.daemon._client_connection(ws, BOB)
            refused, submitted = ws.replies
            assert refused == {"ok": False, "error": f"job {job} belongs to alice: bob may not cancel it"}
            assert submitted["ok"] and submitted["job"]["user"] == "bob"
            ws = ScriptedSocket({"op": "cancel", "job": job})
            await ctl.daemon._client_connection(ws)  # token mode: no caller, may do everything
            assert ws.replies[0]["ok"] and ws.replies[0]["job"]["state"] == "CANCELLED"


async def test_a_user_with_no_account_and_no_job_is_refused_not_an_empty_list(tmp_path):
    # The real clock: the account lookup runs on a thread, and a mock clock would jump past the guard.
    with trio.fail_after(30):
        async with controller(tmp_path) as ctl:
            op = ctl.daemon._client_op
            await submit(ctl, ALICE)  # alice has no account here, but a job: she is known
            for request in ({"op": "jobs", "user": "nosuchuser"}, {"op": "history", "user": "nosuchuser"}):
                with pytest.raises(LocalProtocolError, match="no user nosuchuser: no account of that name here and no job"):
                    await op(request, BOB)
            assert len((await op({"op": "jobs", "user": "alice"}, BOB))["jobs"]) == 1
            assert (await op({"op": "history", "user": "alice"}, BOB))["jobs"] == []  # nothing finished yet
            assert (await op({"op": "jobs", "user": "root"}, BOB))["jobs"] == []  # an account, no job: empty
