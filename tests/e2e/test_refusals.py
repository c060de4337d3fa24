"""What the controller refuses, and that a refusal touches nothing else.

* a wrong or missing token: the CLI exits non-zero with a one-line reason, an
  agent with a wrong token never becomes a node;
* malformed input on one agent connection (not CBOR, not a map, text, an
  unknown type, oversize, garbage after a valid join): an error and a close
  on THAT connection, while the real agent and clients carry on;
* an authenticated agent reporting on a job placed on another agent: acked
  ``stale_attempt``, the job's record unchanged, its true outcome recorded
  later.
"""

from __future__ import annotations

import re
import time

import cbor2
import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from reckon.daemon import wire
from reckon.model import messages as M
from reckon.model.facts import JobFinished

pytestmark = pytest.mark.e2e

PROBE_GUARD = 20  # seconds for one raw-protocol probe


def test_wrong_token_is_refused(cluster, tmp_path):
    cluster.use_token("e2e-right-token-0123456789")
    cluster.start_controller()
    cluster.start_agent("a1")

    reason = cluster.one_line_reason(cluster.run("nodes", "--json", token="e2e-wrong-token"))
    assert "token" in reason and "refused" in reason, reason
    reason = cluster.one_line_reason(cluster.run("submit", "--", "true", token=None))
    assert "token" in reason, reason
    assert cluster.nodes()["a1"]["state"] == "IDLE"  # the right token works

    wrong = tmp_path / "wrong-token"
    wrong.write_text("e2e-wrong-token\n")
    cluster.start_agent("rogue", "-v", token_file=wrong, wait_joined=False)
    # It tries (and is told no) more than once, at its refusal pace: -v shows each
    # further attempt; the reason is logged once (a WARNING), not once per attempt.
    cluster.wait_for(lambda: "refused again" in cluster.log_text("rogue")
                     or cluster.log_text("rogue").count("refused us (401)") > 1,
                     what="the rogue agent to be refused a second time")
    rogue = cluster.log_text("rogue")
    assert len(re.findall(r"WARNING .*refused us \(401\): bad token", rogue)) == 1, rogue
    assert len([line for line in rogue.splitlines() if " WARNING " in line]) <= 2, rogue
    assert len(re.findall(r"refused connections from 127\.0\.0\.1 to /agent: bad token",
                          cluster.log_text("controller"))) == 1
    assert "rogue" not in cluster.nodes()
    assert cluster.running("rogue"), "a refused agent keeps trying; it does not crash"

    # Nothing was run by the refused submit; the right token still submits and runs.
    assert cluster.jobs() == {}
    job = cluster.submit("sh", "-c", "exit 0")
    assert cluster.wait_job(job)["state"] == "COMPLETED"


async def _probe_agent_endpoint(url: str, payload: bytes | str) -> tuple[list[dict], int | None]:
    """Send one message to /agent; what came back (CBOR maps) and the close code."""
    received: list[dict] = []
    code = None
    with trio.fail_after(PROBE_GUARD):
        async with open_websocket_url(url + "/agent", max_message_size=1 << 20) as ws:
            try:
                await ws.send_message(payload)
            except ConnectionClosed:
                pass  # closed while we were still sending (the oversize one): read the reason below
            try:
                while True:
                    received.append(cbor2.loads(await ws.get_message()))
            except ConnectionClosed as exc:
                code = exc.reason.code
    return received, code


async def _join_then(url: str, name: str, payload: bytes) -> tuple[M.Message, list[dict], int | None]:
    with trio.fail_after(PROBE_GUARD):
        async with open_websocket_url(url + "/agent", max_message_size=1 << 20) as ws:
            await ws.send_message(wire.encode(M.Join(agent=name, slots=0, version=M.PROTOCOL_VERSION)))
            welcome = wire.decode(await ws.get_message(), to="agent")
            await ws.send_message(payload)
            received, code = [], None
            try:
                while True:
                    received.append(cbor2.loads(await ws.get_message()))
            except ConnectionClosed as exc:
                code = exc.reason.code
    return welcome, received, code


def test_malformed_messages_close_only_their_own_connection(cluster, truth_dir):
    cluster.start_controller()
    cluster.start_agent("a1", slots=2)
    gate = truth_dir / "go"
    job = cluster.submit("sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done; exit 6")
    cluster.wait_job(job, states=("RUNNING",))

    bad = {
        "not CBOR": (b"\xff\xfe\x00garbage", "undecodable CBOR"),
        "a CBOR list of non-maps": (cbor2.dumps([1, 2, 3]), "a message must be a map, got int"),
        "a CBOR number": (cbor2.dumps(7), "a frame must be a CBOR map or an array of maps"),
        "text": ("hello", "expected a binary CBOR message"),
        "unknown type": (cbor2.dumps({"type": "bogus", "x": 1}), "unknown message type 'bogus'"),
        "join with a bad field": (cbor2.dumps({"type": "join", "agent": "x", "slots": -1, "version": 1}), "slots"),
    }
    for what, (payload, expected) in bad.items():
        received, code = trio.run(_probe_agent_endpoint, cluster.url, payload)
        assert [m["type"] for m in received] == ["error"], (what, received)
        assert expected in received[0]["reason"], (what, received)
        assert code == 1008, (what, code)
        # The controller still serves everyone else.
        assert cluster.nodes()["a1"]["state"] == "MIXED", what  # 1 of 2 slots used

    received, code = trio.run(_probe_agent_endpoint, cluster.url, b"\0" * (wire.MAX_AGENT_MESSAGE + 1))
    assert received == [] and code == 1009, (received, code)  # MESSAGE_TOO_BIG, before any decoding

    # A connection that joined properly and then sends garbage: refused and dropped too.
    welcome, received, code = trio.run(_join_then, cluster.url, "probe", cbor2.dumps({"type": "nonsense"}))
    assert isinstance(welcome, M.Welcome)
    assert [m["type"] for m in received] == ["error"] and code == 1008
    cluster.wait_node("probe", ("DISCONNECTED",))

    # Other clients and the real agent never noticed: the job still completes, on the
    # agent's first and only connection.
    assert cluster.running("controller")
    assert cluster.job(job)["state"] == "RUNNING"
    gate.touch()
    record = cluster.wait_job(job)
    assert (record["state"], record["exit_code"], record["agent"]) == ("FAILED", 6, "a1")
    assert cluster.log_text("a1").count("connected to") == 1
    assert cluster.nodes()["a1"]["state"] == "IDLE"


async def _intrude(url: str, job: str, attempt: int) -> list[M.Message]:
    """Join as agent "intruder" (no slots: nothing gets placed on it) and report on ``job``."""
    with trio.fail_after(PROBE_GUARD):
        async with open_websocket_url(url + "/agent", max_message_size=1 << 20) as ws:
            await ws.send_message(wire.encode(M.Join(agent="intruder", slots=0, version=M.PROTOCOL_VERSION)))
            got = [wire.decode(await ws.get_message(), to="agent")]
            now = time.time()
            for report in (M.Finished(job=job, attempt=attempt, exit_code=0, signal=None, finished_at=now,
                                      started_at=now - 1),
                           M.Finished(job=job, attempt=attempt + 1, exit_code=0, signal=None, finished_at=now)):
                await ws.send_message(wire.encode(report))
                got.append(wire.decode(await ws.get_message(), to="agent"))
            # A resync report for a round that does not exist changes nothing either.
            await ws.send_message(wire.encode(M.ResyncReport(token=b"\1" * M.TOKEN_BYTES, page=0, pages=1, entries=(
                M.ReportEntry(job=job, attempt=attempt, status=M.EntryStatus.FINISHED, exit_code=0,
                              finished_at=now),))))
            got.append(wire.decode(await ws.get_message(), to="agent"))
    return got


def test_an_agent_cannot_report_on_another_agents_job(cluster, truth_dir):
    cluster.start_controller()
    cluster.start_agent("a1", slots=2)
    gate = truth_dir / "go"
    job = cluster.submit("sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done; exit 7")
    cluster.wait_for(lambda: cluster.job(job)["started_at"] is not None,
                     what="the agent to report the start (it does so at its next tick)")
    before = cluster.job(job)
    assert before["agent"] == "a1" and before["attempt"] == 1 and before["state"] == "RUNNING"

    welcome, ack, ack_next, stale_round = trio.run(_intrude, cluster.url, job, 1)
    assert isinstance(welcome, M.Welcome) and welcome.token is None
    assert isinstance(ack, M.Ack) and (ack.job, ack.attempt, ack.outcome) == (job, 1, M.AckOutcome.STALE_ATTEMPT)
    assert isinstance(ack_next, M.Ack) and ack_next.outcome is M.AckOutcome.STALE_ATTEMPT
    assert isinstance(stale_round, M.Error) and "stale" in stale_round.reason and not stale_round.fatal

    after = cluster.job(job)
    assert after == before, "a report from the wrong agent changed the job"
    gate.touch()
    record = cluster.wait_job(job)
    assert (record["state"], record["exit_code"], record["agent"], record["attempt"]) == ("FAILED", 7, "a1", 1)
    assert record["finished_at"] > after["started_at"]

    cluster.stop("controller")
    finishes = [(f.job, f.attempt, f.exit_code) for f in cluster.facts() if isinstance(f, JobFinished)]
    assert finishes == [(job, 1, 7)]

