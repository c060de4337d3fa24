"""The message codec, event validation, and what bad input does to the models (nothing)."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from tests.model.harness import Harness, facts_of, sends_of, spec, token

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import SESSION_TRANSITIONS, Agent, AgentConfig, SessionEvent, SessionState
from reckon.model.errors import LocalProtocolError, RemoteProtocolError
from reckon.model.jobs import JobSpec, JobState
from reckon.model.resync import ROUND_TRANSITIONS, ResyncRound, RoundEvent, RoundState
from reckon.model.nodes import NodeState

TOK = token(0xABC)
FULL_SPEC = spec("build", slots=2, command=("make", "-j", ""))

ENTRIES = (
    M.ReportEntry(job="1", attempt=1, status=M.EntryStatus.RUNNING, started_at=1.5),
    M.ReportEntry(job="2", attempt=3, status=M.EntryStatus.FINISHED, exit_code=0, finished_at=9.0, started_at=2.0),
    M.ReportEntry(job="3", attempt=1, status=M.EntryStatus.FINISHED, signal=9, finished_at=9.5),
    M.ReportEntry(job="4", attempt=2, status=M.EntryStatus.UNRECOGNIZED),
)

TO_CONTROLLER_SAMPLES = [
    M.Join(agent="a1", slots=8, version=1, running=2),
    M.Join(agent="a1", slots=8, version=2, log_dir="/var/lib/reckon/jobs", log_layout="flat"),
    M.ResyncReport(token=TOK, page=1, pages=3, entries=ENTRIES),
    M.ResyncReport(token=TOK, page=0, pages=1, entries=()),
    M.Started(job="7", attempt=2, started_at=3.25),
    M.Finished(job="7", attempt=2, exit_code=-1, signal=None, finished_at=4.0, started_at=3.25),
    M.Finished(job="8", attempt=1, exit_code=None, signal=15, finished_at=4.0),
    M.Heartbeat(running=3, digest=(1 << 64) - 1, seen_seq=12),
    M.Started(job="7", attempt=2, started_at=3.25, uid="a1b2c3d4e5f60718"),
    M.Finished(job="7", attempt=2, exit_code=0, signal=None, finished_at=4.0, uid="a1b2c3d4e5f60718"),
    M.ResyncReport(token=TOK, page=0, pages=1, entries=(
        M.ReportEntry(job="1", attempt=1, status=M.EntryStatus.RUNNING, uid="a1b2c3d4e5f60718"),)),
    M.DispatchRefused(job="9", attempt=1, uid="a1b2c3d4e5f60718", reason="held for another submission"),
    M.DispatchRefused(job="9", attempt=1, reason="held with a different job spec"),
    M.OutputChunk(request=4, status=M.OutputStatus.DATA, data=b"hello\n", size=6, path="/var/lib/reckon/jobs/9.1.stdout"),
    M.OutputChunk(request=5, status=M.OutputStatus.EXPIRED, reason="deleted by retention"),
]
TO_AGENT_SAMPLES = [
    M.Welcome(seq=1, version=1, token=None),
    M.Welcome(seq=1, version=1, token=TOK, query_pages=4),
    M.ResyncQuery(seq=2, token=TOK, page=0, pages=2, jobs=(("1", 1), ("12", 3))),
    M.ResyncDone(seq=5, token=TOK),
    M.Dispatch(seq=6, job="9", attempt=1, spec=FULL_SPEC),
    M.Kill(seq=7, job="9", attempt=1),
    M.Dispatch(seq=6, job="9", attempt=1, spec=FULL_SPEC, uid="a1b2c3d4e5f60718"),
    M.Kill(seq=7, job="9", attempt=1, uid="a1b2c3d4e5f60718"),
    M.Signal(seq=8, job="9", attempt=1, signal=12),
    M.Signal(seq=8, job="9", attempt=1, signal=10, batch_only=True, uid="a1b2c3d4e5f60718"),
    M.Signal(seq=9, job="9", attempt=1, signal=12, full=True),
    M.Ack(seq=8, job="9", attempt=1, outcome=M.AckOutcome.STALE_ATTEMPT),
    M.Error(seq=0, reason="nope", fatal=False),
    M.OutputRead(request=4, job="9", attempt=1, stream=M.OutputStream.STDOUT, offset=0, limit=65536),
    M.Dispatch(seq=9, job="9", attempt=1, spec=JobSpec(name="out", command=("true",), output="%j.%a.out",
                                                       error="/tmp/%j.err")),
    M.Error(seq=0, reason="not the leader", leader="ws://b:7420"),
]


def _plain(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bytes, bool))


def test_every_message_type_has_a_sample() -> None:
    assert {type(m) for m in TO_CONTROLLER_SAMPLES} == set(M.TO_CONTROLLER.values())
    assert {type(m) for m in TO_AGENT_SAMPLES} == set(M.TO_AGENT.values())


@pytest.mark.parametrize("msg", TO_CONTROLLER_SAMPLES, ids=lambda m: m.TYPE)
def test_agent_message_round_trips(msg: M.Message) -> None:
    wire = M.to_wire(msg)
    assert wire["type"] == msg.TYPE and _plain(wire)
    assert M.from_wire(copy.deepcopy(wire), to="controller") == msg


@pytest.mark.parametrize("msg", TO_AGENT_SAMPLES, ids=lambda m: m.TYPE)
def test_controller_message_round_trips(msg: M.Message) -> None:
    wire = M.to_wire(msg)
    assert wire["type"] == msg.TYPE and _plain(wire)
    assert M.from_wire(copy.deepcopy(wire), to="agent") == msg


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.status.value)
def test_report_entry_round_trips(entry: M.ReportEntry) -> None:
    assert M.ReportEntry.from_wire(entry.to_wire()) == entry


def _w(msg: M.Message, **override: Any) -> dict[str, Any]:
    wire = M.to_wire(msg)
    wire.update(override)
    return wire


def _without(msg: M.Message, key: str) -> dict[str, Any]:
    wire = M.to_wire(msg)
    del wire[key]
    return wire


FINISHED = M.Finished(job="1", attempt=1, exit_code=0, signal=None, finished_at=1.0)
REPORT = M.ResyncReport(token=TOK, page=0, pages=1, entries=ENTRIES[:1])
QUERY = M.ResyncQuery(seq=1, token=TOK, page=0, pages=1, jobs=(("1", 1),))
JOIN = M.Join(agent="a1", slots=1, version=1)
DISPATCH = M.Dispatch(seq=1, job="1", attempt=1, spec=FULL_SPEC)

MALFORMED: list[tuple[str, str, Any, str]] = [
    ("not a map", "controller", ["join"], "must be a map"),
    ("no type", "controller", {"agent": "a1"}, "unknown message type None"),
    ("unknown type", "controller", {"type": "frobnicate"}, "unknown message type 'frobnicate'"),
    ("unhashable type", "controller", {"type": ["join"]}, "unknown message type"),
    ("wrong direction", "controller", M.to_wire(M.Kill(seq=1, job="1", attempt=1)), "unknown message type 'kill'"),
    ("unknown field", "controller", _w(JOIN, color="blue"), "unknown fields ['color']"),
    ("missing field", "controller", _without(JOIN, "slots"), "slots"),
    ("missing token", "controller", _without(REPORT, "token"), "token"),
    ("wrong type str", "controller", _w(JOIN, slots="4"), "slots must be an integer"),
    ("unknown log layout", "controller", _w(JOIN, log_layout="nested"), "log_layout must be one of"),
    ("log layout not a str", "controller", _w(JOIN, log_layout=["flat"]), "log_layout must be a string"),
    ("wrong type bool", "controller", _w(FINISHED, attempt=True), "attempt must be an integer"),
    ("wrong type float", "controller", _w(M.Heartbeat(running=0, digest=0, seen_seq=0), digest=1.5),
     "digest must be an integer"),
    ("digest too big", "controller", _w(M.Heartbeat(running=0, digest=0, seen_seq=0), digest=1 << 64), "digest"),
    ("empty job id", "controller", _w(FINISHED, job=""), "job must not be empty"),
    ("token too short", "controller", _w(REPORT, token=b"\x00" * 15), "token must be 16..16 bytes long"),
    ("token too long", "agent", _w(QUERY, token=b"\x00" * 17), "token must be 16..16 bytes long"),
    ("token not bytes", "controller", _w(REPORT, token="0" * 16), "token must be bytes"),
    ("negative attempt", "controller", _w(FINISHED, attempt=-1), "attempt must be >= 1"),
    ("zero attempt", "agent", _w(M.Kill(seq=1, job="1", attempt=1), attempt=0), "attempt must be >= 1"),
    ("nan time", "controller", _w(FINISHED, finished_at=math.nan), "finished_at must be a non-negative number"),
    ("infinite time", "controller", _w(FINISHED, finished_at=math.inf),
     "finished_at must be a non-negative number, got inf"),
    ("negative time", "controller", _w(M.Started(job="1", attempt=1, started_at=0.0), started_at=-1.0),
     "started_at must be a non-negative number"),
    ("no outcome", "controller", _w(FINISHED, exit_code=None, signal=None), "needs an exit code or a signal"),
    ("signal 0", "controller", _w(FINISHED, exit_code=None, signal=0), "signal must be >= 1"),
    ("page out of range", "controller", _w(REPORT, page=1, pages=1), "page must be <= 0"),
    ("zero pages", "agent", _w(QUERY, pages=0), "pages must be >= 1"),
    ("oversize query page", "agent", _w(QUERY, jobs=[["1", 1]] * (M.MAX_PAGE_ENTRIES + 1)),
     f"at most {M.MAX_PAGE_ENTRIES} entries"),
    ("entries not a list", "controller", _w(REPORT, entries="x"), "entries must be a list"),
    ("short entry", "controller", _w(REPORT, entries=[["1", 1, "running", None, None, None]]), "7 fields"),
    ("unknown status", "controller", _w(REPORT, entries=[["1", 1, "zombie", None, None, None, None]]),
     "unknown entry status 'zombie'"),
    ("unhashable status", "controller", _w(REPORT, entries=[["1", 1, [], None, None, None, None]]), "unhashable"),
    ("running with outcome", "controller", _w(REPORT, entries=[["1", 1, "running", 0, None, None, 1.0]]),
     "carries no outcome"),
    ("finished without time", "controller", _w(REPORT, entries=[["1", 1, "finished", 0, None, None, None]]),
     "finished_at must be a number"),
    ("query pair of 3", "agent", _w(QUERY, jobs=[["1", 1, 1]]), "(job, attempt)"),
    ("query pair not a list", "agent", _w(QUERY, jobs=["1"]), "jobs[0] must be tuple"),
    ("unknown ack outcome", "agent", _w(M.Ack(seq=1, job="1", attempt=1, outcome=M.AckOutcome.APPLIED),
                                       outcome="maybe"), "unknown ack outcome 'maybe'"),
    ("welcome pages without token", "agent", _w(M.Welcome(seq=1, version=1, token=None), query_pages=2),
     "query_pages must be <= 0"),
    ("welcome seq 0", "agent", _w(M.Welcome(seq=1, version=1, token=None), seq=0), "seq must be >= 1"),
    ("error fatal not bool", "agent", _w(M.Error(seq=1, reason="x"), fatal="yes"), "fatal must be a boolean"),
    ("spec not a map", "agent", _w(DISPATCH, spec="make"), "job spec must be a map"),
    ("spec empty command", "agent", _w(DISPATCH, spec={**FULL_SPEC.to_dict(), "command": []}),
     "command must not be empty"),
    ("spec zero slots", "agent", _w(DISPATCH, spec={**FULL_SPEC.to_dict(), "slots": 0}), "slots must be >= 1"),
    ("spec env with =", "agent", _w(DISPATCH, spec={**FULL_SPEC.to_dict(), "env": [["A=B", "c"]]}),
     "must not contain '='"),
]


@pytest.mark.parametrize("to,data,expected", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_message_raises_remote_protocol_error(to: str, data: Any, expected: str) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        M.from_wire(data, to=to)
    text = str(info.value)
    assert text.startswith("malformed message: ")
    assert expected in text


def test_oversize_report_page_is_refused() -> None:
    row = ["1", 1, "running", None, None, None, None]
    with pytest.raises(RemoteProtocolError, match=f"at most {M.MAX_PAGE_ENTRIES} entries"):
        M.from_wire(_w(REPORT, entries=[row] * (M.MAX_PAGE_ENTRIES + 1)), to="controller")


def test_a_join_without_log_layout_is_an_agent_before_the_flat_layout() -> None:
    """Agents before the flat layout send no log_layout: their files are in a directory per attempt."""
    old = {k: v for k, v in M.to_wire(M.Join(agent="a1", slots=1, version=1, log_dir="/s/jobs")).items()
           if k != "log_layout"}
    join = M.from_wire(old, to="controller")
    assert join.log_layout == "attempt-dir"
    assert M.output_paths(join.log_dir, join.log_layout, "7", 2) == ("/s/jobs/7.2/stdout", "/s/jobs/7.2/stderr")
    assert M.output_paths("/s/jobs", "flat", "7", 2) == ("/s/jobs/7.2.stdout", "/s/jobs/7.2.stderr")


def test_pages_helper_splits_without_dropping() -> None:
    items = list(range(23))
    chunks = M.pages(items, 5)
    assert [len(c) for c in chunks] == [5, 5, 5, 5, 3] and sum(chunks, []) == items
    assert M.pages([], 5) == [[]]
    with pytest.raises(ValueError):
        M.pages(items, 0)


def test_running_digest_is_order_free_and_sensitive_to_attempts() -> None:
    pairs = [("1", 1), ("2", 1), ("3", 2)]
    assert M.running_digest(pairs) == M.running_digest(reversed(pairs))
    assert M.running_digest(pairs) != M.running_digest([("1", 1), ("2", 1), ("3", 1)])
    assert M.running_digest([]) == 0


# ---- events validate themselves ----------------------------------------------------


@pytest.mark.parametrize("make,expected", [
    (lambda: E.Tick(now=math.nan), "now must be a non-negative number"),
    (lambda: E.Tick(now=1.0, jitter=1.0), "jitter must be in [0, 1)"),
    (lambda: E.AgentJoined(conn=1, join=JOIN, token=b"x" * 8, now=0.0), "token must be 16..16 bytes long"),
    (lambda: E.AgentJoined(conn=1, join=FINISHED, token=TOK, now=0.0), "join must be a Join message"),
    (lambda: E.MessageFromAgent(conn=0, message=FINISHED, now=0.0), "conn must be >= 1"),
    (lambda: E.ConnectionClosed(conn=1, now=-5.0), "now must be a non-negative number"),
    (lambda: E.RoundDeadlineExpired(agent="", token=TOK, now=0.0), "agent must not be empty"),
    (lambda: E.SubmitJob(spec={"name": "x"}, now=0.0), "spec must be a JobSpec"),
    (lambda: E.CancelJob(job=1, now=0.0), "job must be a string"),
    (lambda: E.DispatchProposed(job="1", agent="a1", now=math.nan), "now must be a non-negative number"),
    (lambda: E.ProcessStarted(job="1", attempt=0, started_at=0.0), "attempt must be >= 1"),
    (lambda: E.ProcessExited(job="1", attempt=1, exit_code=None, signal=None, finished_at=0.0, now=0.0),
     "needs an exit code or a signal"),
    (lambda: E.ProcessLost(job="1", attempt=-2, now=0.0), "attempt must be >= 1"),
])
def test_malformed_event_is_refused_at_construction(make: Any, expected: str) -> None:
    with pytest.raises(ValueError) as info:
        make()
    assert expected in str(info.value)


# ---- bad input to the controller changes nothing ------------------------------------------------


def _busy() -> Harness:
    h = Harness()
    h.join("a1")
    h.run_jobs(2)
    h.exit("a1", "1", exit_code=3)
    h.pump()
    return h


def test_controller_refuses_an_unknown_event_and_changes_nothing() -> None:
    h = _busy()
    before = h.controller.state.digest()
    with pytest.raises(LocalProtocolError, match="does not handle"):
        h.controller.handle(E.Connected(now=1.0))  # an agent event
    assert h.controller.state.digest() == before


def test_unexpected_message_from_agent_is_refused_and_changes_nothing() -> None:
    h = _busy()
    before, log_len = h.controller.state.digest(), len(h.log)
    commands = h.send_to_controller("a1", M.Join(agent="a1", slots=16, version=1))
    errors = sends_of(commands, M.Error)
    assert len(errors) == 1 and errors[0].fatal and "unexpected join" in errors[0].reason
    assert any(isinstance(c, E.Close) for c in commands)
    assert facts_of(commands) == [] and h.controller.state.digest() == before and len(h.log) == log_len


def test_message_on_an_unknown_connection_is_ignored() -> None:
    h = _busy()
    before = h.controller.state.digest()
    assert h.controller.handle(E.MessageFromAgent(conn=999, message=FINISHED, now=1.0)) == []
    assert h.controller.state.digest() == before


def test_second_join_on_the_same_connection_raises_and_changes_nothing() -> None:
    h = _busy()
    conn = h.agents["a1"].conn
    before, session = h.controller.state.digest(), h.controller.sessions["a1"]
    seq = session.seq
    with pytest.raises(RemoteProtocolError, match="already joined"):
        h.controller.handle(E.AgentJoined(conn=conn, join=M.Join(agent="a1", slots=99, version=1),
                                          token=TOK, now=1.0))
    assert h.controller.state.digest() == before
    assert (session.conn, session.seq, session.round) == (conn, seq, None)


def test_unsupported_version_is_refused_without_registering() -> None:
    h = Harness()
    before = h.controller.state.digest()
    commands = h.controller.handle(E.AgentJoined(conn=5, join=M.Join(agent="a9", slots=1, version=99),
                                                 token=TOK, now=0.0))
    errors = sends_of(commands, M.Error)
    assert len(errors) == 1 and "not supported" in errors[0].reason
    assert any(isinstance(c, E.Close) and c.conn == 5 for c in commands)
    assert facts_of(commands) == [] and h.controller.state.digest() == before
    assert "a9" not in h.controller.sessions


def test_page_with_a_token_never_issued_gets_a_nonfatal_error() -> None:
    h = Harness()
    h.join("a1")
    h.run_jobs(1)
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    rnd = h.controller.sessions["a1"].round
    before = h.controller.state.digest()
    commands = h.send_to_controller("a1", M.ResyncReport(token=token(0xDEAD), page=0, pages=1, entries=()))
    assert [(type(m), m.fatal, m.reason) for m in sends_of(commands)] == [
        (M.Error, False, "stale resync round token")]
    assert not any(isinstance(c, E.Close) for c in commands)
    assert h.controller.state.digest() == before and h.controller.sessions["a1"].round is rnd
    assert rnd.received == {} and rnd.state is RoundState.AWAITING_REPORT


def test_page_when_no_round_is_open_gets_a_nonfatal_error() -> None:
    h = _busy()
    before = h.controller.state.digest()
    commands = h.send_to_controller("a1", REPORT)
    assert [(type(m), m.fatal) for m in sends_of(commands)] == [(M.Error, False)]
    assert h.controller.state.digest() == before and h.controller.node_state("a1") == NodeState.MIXED


def test_report_entry_for_an_unknown_job_invents_nothing() -> None:
    h = Harness()
    h.join("a1")
    h.run_jobs(1)
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.agents["a1"].inbox.clear()
    tok = h.controller.sessions["a1"].round.token
    before, log_len = h.controller.state.digest(), len(h.log)
    commands = h.send_to_controller("a1", M.ResyncReport(token=tok, page=0, pages=1, entries=(
        M.ReportEntry(job="1", attempt=1, status=M.EntryStatus.RUNNING),
        M.ReportEntry(job="77", attempt=1, status=M.EntryStatus.FINISHED, exit_code=0, finished_at=1.0),
        M.ReportEntry(job="78", attempt=2, status=M.EntryStatus.RUNNING),
        M.ReportEntry(job="79", attempt=1, status=M.EntryStatus.UNRECOGNIZED),
    )))
    # No job or agent record changes; only the ids the agent holds are never issued (INV-OUTCOME-OWNER).
    assert facts_of(commands) == [F.JobIdsReserved(upto=79)]  # one for the whole report
    assert len(h.log) == log_len + 1
    assert h.controller.state.digest()[2:] == before[2:] and h.controller.state.next_job == 80
    assert set(h.controller.state.jobs) == {"1"}
    assert [(m.job, m.attempt) for m in sends_of(commands, M.Kill)] == [("78", 2)]  # its process must stop
    assert any(isinstance(m, M.ResyncDone) for m in sends_of(commands))  # handled: the round resolved


def test_completion_for_an_unknown_job_is_acked_unknown() -> None:
    h = _busy()
    before = h.controller.state.digest()
    commands = h.send_to_controller("a1", M.Finished(job="404", attempt=1, exit_code=0, signal=None,
                                                     finished_at=1.0))
    assert [m.outcome for m in sends_of(commands, M.Ack)] == [M.AckOutcome.UNKNOWN_JOB]
    assert facts_of(commands) == [F.JobIdsReserved(upto=404)]  # the id is never issued; no job changes
    assert h.controller.state.digest()[2:] == before[2:]


def test_cancel_of_an_unknown_job_raises_and_changes_nothing() -> None:
    h = _busy()
    before, log_len = h.controller.state.digest(), len(h.log)
    with pytest.raises(LocalProtocolError, match="unknown job '404'"):
        h.cancel("404")
    with pytest.raises(LocalProtocolError, match="already FAILED"):
        h.cancel("1")
    assert h.controller.state.digest() == before and len(h.log) == log_len


def test_cancel_twice_changes_nothing_the_second_time() -> None:
    h = _busy()
    first = h.cancel("2")
    before = h.controller.state.digest()
    assert len(facts_of(first)) == 1 and len(sends_of(first, M.Kill)) == 1
    assert h.cancel("2") == [] and h.controller.state.digest() == before
    assert h.job("2").state is JobState.RUNNING and h.job("2").cancel_requested


def test_started_for_a_job_not_running_here_is_ignored() -> None:
    h = _busy()
    before = h.controller.state.digest()
    for msg in (M.Started(job="1", attempt=1, started_at=1.0), M.Started(job="2", attempt=5, started_at=1.0)):
        assert facts_of(h.send_to_controller("a1", msg)) == []
    assert h.controller.state.digest() == before
    # A job this history never issued: no job changes, its id is never issued, its process is killed.
    commands = h.send_to_controller("a1", M.Started(job="404", attempt=1, started_at=1.0))
    assert facts_of(commands) == [F.JobIdsReserved(upto=404)]
    assert [(m.job, m.attempt) for m in sends_of(commands, M.Kill)] == [("404", 1)]
    assert h.controller.state.digest()[2:] == before[2:]


# ---- bad input to the agent changes nothing ----------------------------------------------------


def _agent_state(agent: Agent) -> tuple:
    return (agent.session, agent.seen_seq, dict(agent.records), {k: (v.report, v.delay, v.next_at)
                                                                  for k, v in agent.outbox.items()},
            agent._query)


def test_agent_refuses_an_unknown_event_and_changes_nothing() -> None:
    agent = Agent(AgentConfig(name="a1", slots=1))
    before = _agent_state(agent)
    with pytest.raises(LocalProtocolError, match="does not handle"):
        agent.handle(E.SubmitJob(spec=FULL_SPEC, now=0.0))
    assert _agent_state(agent) == before


@pytest.mark.parametrize("msg", [
    M.Welcome(seq=40, version=1, token=None),
    M.Welcome(seq=40, version=1, token=TOK, query_pages=1),
], ids=["plain", "resync"])
def test_agent_refuses_welcome_while_operating_and_changes_nothing(msg: M.Message) -> None:
    h = _busy()
    agent = h.agent("a1")
    before = _agent_state(agent)
    with pytest.raises(RemoteProtocolError, match="not allowed while operating"):
        agent.handle(E.MessageFromController(message=msg, now=1.0))
    assert _agent_state(agent) == before


def test_agent_refuses_query_before_welcome_and_changes_nothing() -> None:
    agent = Agent(AgentConfig(name="a1", slots=1))
    agent.handle(E.Connected(now=0.0))
    before = _agent_state(agent)
    with pytest.raises(RemoteProtocolError, match="before welcome"):
        agent.handle(E.MessageFromController(message=QUERY, now=0.0))
    assert _agent_state(agent) == before


def test_agent_refuses_query_pages_that_disagree_and_changes_nothing() -> None:
    agent = Agent(AgentConfig(name="a1", slots=1))
    agent.handle(E.Connected(now=0.0))
    agent.handle(E.MessageFromController(message=M.Welcome(seq=1, version=1, token=TOK, query_pages=2), now=0.0))
    before = _agent_state(agent)
    with pytest.raises(RemoteProtocolError, match="disagree"):
        agent.handle(E.MessageFromController(message=QUERY, now=0.0))  # says 1 page, welcome said 2
    assert _agent_state(agent) == before


def test_agent_refuses_an_agent_bound_message_type() -> None:
    h = _busy()
    agent = h.agent("a1")
    before = _agent_state(agent)
    with pytest.raises(RemoteProtocolError, match="unexpected finished"):
        agent.handle(E.MessageFromController(message=FINISHED, now=1.0))
    assert _agent_state(agent) == before


def test_agent_ignores_messages_while_disconnected() -> None:
    agent = Agent(AgentConfig(name="a1", slots=1))
    assert agent.handle(E.MessageFromController(message=DISPATCH, now=0.0)) == []
    assert agent.records == {} and agent.seen_seq == 0


# ---- the round and session machines: what is not in the table raises and changes nothing -------


ALL_ROUND_PAIRS = [(s, e) for s in RoundState for e in RoundEvent]
ALL_SESSION_PAIRS = [(s, e) for s in SessionState for e in SessionEvent]


@pytest.mark.parametrize("state,event", [p for p in ALL_ROUND_PAIRS if p not in ROUND_TRANSITIONS],
                         ids=lambda v: v.value)
def test_missing_round_transition_raises_and_changes_nothing(state: RoundState, event: RoundEvent) -> None:
    rnd = ResyncRound(agent="a1", token=TOK, queried={"1": 1}, deadline=1.0, state=state)
    with pytest.raises(LocalProtocolError, match="not allowed"):
        rnd._move(event)
    assert rnd.state is state


@pytest.mark.parametrize("state", sorted({s for s in RoundState if not any(k[0] is s for k in ROUND_TRANSITIONS)},
                                         key=lambda s: s.value), ids=lambda s: s.value)
def test_ended_round_refuses_pages_discards_and_deadlines(state: RoundState) -> None:
    rnd = ResyncRound(agent="a1", token=TOK, queried={}, deadline=1.0, state=state)
    for action in (rnd.discard, rnd.expire, lambda: rnd.add_page(REPORT)):
        with pytest.raises(LocalProtocolError):
            action()
        assert rnd.state is state and rnd.received == {}


def test_round_refuses_a_conflicting_duplicate_page_and_keeps_nothing() -> None:
    rnd = ResyncRound(agent="a1", token=TOK, queried={"1": 1, "2": 1}, deadline=1.0)
    entry = M.ReportEntry(job="1", attempt=1, status=M.EntryStatus.RUNNING)
    assert rnd.add_page(M.ResyncReport(token=TOK, page=0, pages=2, entries=(entry,))) is None
    assert rnd.add_page(M.ResyncReport(token=TOK, page=0, pages=2, entries=(entry,))) is None  # exact duplicate
    with pytest.raises(RemoteProtocolError, match="different entries"):
        rnd.add_page(M.ResyncReport(token=TOK, page=0, pages=2, entries=()))
    with pytest.raises(RemoteProtocolError, match="twice"):
        rnd.add_page(M.ResyncReport(token=TOK, page=1, pages=2, entries=(entry,)))
    assert rnd.state is RoundState.COLLECTING and set(rnd.received) == {0}


@pytest.mark.parametrize("state,event", [p for p in ALL_SESSION_PAIRS if p not in SESSION_TRANSITIONS],
                         ids=lambda v: v.value)
def test_missing_session_transition_raises_and_changes_nothing(state: SessionState, event: SessionEvent) -> None:
    agent = Agent(AgentConfig(name="a1", slots=1))
    agent.session = state
    with pytest.raises(RemoteProtocolError, match="not allowed"):
        agent._move(event)
    assert agent.session is state


def test_connect_while_connected_raises_and_changes_nothing() -> None:
    h = _busy()
    agent = h.agent("a1")
    before = _agent_state(agent)
    with pytest.raises(RemoteProtocolError):
        agent.handle(E.Connected(now=5.0))
    assert _agent_state(agent) == before


def test_a_standby_names_the_leader_only_to_agents_that_understand_it() -> None:
    new = M.not_the_leader(M.NOT_LEADER_SINCE, "ws://a:7420")
    assert new.leader == "ws://a:7420" and new.fatal and not new.permanent
    assert M.to_wire(new)["leader"] == "ws://a:7420"
    assert M.from_wire(M.to_wire(new), to="agent") == new
    for version in (1, 2, 3):  # an older agent's decoder refuses fields it does not know
        old = M.not_the_leader(version, "ws://a:7420")
        assert "leader" not in M.to_wire(old) and "ws://a:7420" in old.reason
    unknown = M.not_the_leader(M.PROTOCOL_VERSION, "")
    assert unknown.leader == "" and "no controller leads" in unknown.reason
    with pytest.raises(ValueError, match="not-the-leader error is fatal"):
        M.Error(seq=0, reason="x", fatal=False, leader="ws://a")
