"""The HTTP API's app without a controller: routing, the OpenAPI document, JSON errors, and what
reaches the backend (a recording fake standing in for the controller's ``_client_op`` path).

The app is driven as hypercorn drives it (an ASGI scope, receive, send), in-process.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from openapi_spec_validator import validate

from reckon.daemon.http import app as app_module, routes
from reckon.daemon.http.app import HttpApp, handshake_of
from reckon.daemon.http.backend import HttpError, Unavailable, error_of
from reckon.model.errors import LocalProtocolError, PermissionDenied


class FakeBackend:
    mode = "token"

    def __init__(self, refuse: str | None = None, raises: BaseException | None = None) -> None:
        self.refuse, self.raises, self.calls = refuse, raises, []

    async def admit(self, request):
        self.seen = request
        return SimpleNamespace(refused=self.refuse, caller="CALLER" if self.refuse is None else None)

    async def call(self, op, fields, caller):
        self.calls.append((op, fields, caller))
        if self.raises is not None:
            raise self.raises
        return {"op": op, "data": b"h\xc3\xa9llo\xff"} if op == "logs" else {"op": op}


async def request(app, method: str, path: str, body: bytes = b"", query: str = "", headers=()):
    sent = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "query_string": query.encode(),
             "headers": [(k.encode(), v.encode()) for k, v in headers], "client": ("127.0.0.1", 5555)}
    await app(scope, receive, send)
    start, payload = sent[0], sent[1]["body"]
    kind = dict(start["headers"])[b"content-type"]
    return start["status"], (json.loads(payload) if kind == b"application/json" else payload)


def test_the_openapi_document_validates_and_names_every_route():
    document = routes.openapi("1.2.3")
    validate(document)  # openapi-spec-validator: OpenAPI 3.1
    assert document["openapi"] == "3.1.0"
    named = {(method.upper(), path) for path, ops in document["paths"].items() for method in ops}
    assert named == {(r.method, routes.API + r.path) for r in routes.ROUTES} | {("GET", routes.API + "/openapi.json")}
    assert len({(r.method, r.path) for r in routes.ROUTES}) == len(routes.ROUTES)  # one route per (method, path)
    ids = [op["operationId"] for ops in document["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))


async def test_each_route_reaches_its_op_with_its_fields():
    backend = FakeBackend()
    app = HttpApp(backend)
    cases = [
        ("GET", "/jobs", "", "state=RUNNING&user=alice", ("jobs", {"state": "RUNNING", "user": "alice"})),
        ("POST", "/jobs", '{"spec": {"name": "x"}, "hold": true}', "", ("submit", {"spec": {"name": "x"}, "hold": True})),
        ("POST", "/jobs", '{"specs": []}', "", ("submit_many", {"specs": []})),
        ("GET", "/jobs/4", "", "", ("show", {"job": "4"})),
        ("POST", "/jobs/4/cancel", '{"array": false, "job": "9"}', "", ("cancel", {"array": False, "job": "4"})),
        ("POST", "/jobs/4/hold", "", "", ("hold", {"job": "4"})),
        ("POST", "/jobs/4/release", "", "", ("release", {"job": "4"})),
        ("POST", "/jobs/4/requeue", "", "", ("requeue", {"job": "4"})),
        ("POST", "/jobs/4/signal", '{"signal": 10}', "", ("signal", {"signal": 10, "job": "4"})),
        ("GET", "/jobs/4/logs", "", "stream=stderr&offset=3&limit=9&attempt=2",
         ("logs", {"job": "4", "stream": "stderr", "offset": 3, "limit": 9, "attempt": 2})),
        ("GET", "/jobs/4/history", "", "", ("history", {"job": "4"})),
        ("POST", "/arrays", '{"spec": {}, "array": "1-3"}', "", ("submit_array", {"spec": {}, "array": "1-3"})),
        ("GET", "/arrays/7", "", "", ("query", {"ids": ["7"]})),
        ("GET", "/query", "", "ids=1,2_3&states=PENDING&since=1.5&limit=3&fields=id,state",
         ("query", {"ids": ["1", "2_3"], "states": ["PENDING"], "since": 1.5, "limit": 3, "fields": ["id", "state"]})),
        ("GET", "/history", "", "user=bob&since=10", ("history", {"user": "bob", "since": 10.0})),
        ("GET", "/nodes", "", "", ("nodes", {})),
        ("POST", "/nodes/n1/drain", "", "", ("drain", {"agent": "n1"})),
        ("POST", "/nodes/n1/resume", "", "", ("resume", {"agent": "n1"})),
        ("POST", "/nodes/n1/forget", "", "", ("forget", {"agent": "n1"})),
        ("GET", "/status", "", "", ("status", {})),
        ("GET", "/whoami", "", "", ("whoami", {})),
        ("GET", "/jobs/4/priority", "", "", ("priority", {"job": "4"})),
        ("POST", "/jobs/4/priority", '{"priority": 5}', "", ("update", {"priority": 5, "job": "4"})),
        ("GET", "/pending", "", "ids=4,7", ("pending", {"ids": ["4", "7"]})),
        ("GET", "/partitions", "", "", ("partitions", {})),
        ("POST", "/partitions/short", '{"remove": true}', "", ("partition_set", {"remove": True, "name": "short"})),
    ]
    for method, path, body, query, expected in cases:
        status, reply = await request(app, method, routes.API + path, body.encode(), query)
        assert status == 200, (method, path, reply)
        assert backend.calls[-1] == (*expected, "CALLER"), (method, path)
    assert {(m, p.replace("4", "{job}").replace("7", "{job}").replace("n1", "{agent}").replace("short", "{name}"))
            for m, p, *_ in cases} == \
        {(r.method, r.path) for r in routes.ROUTES}  # every route is in the table above
    status, reply = await request(app, "GET", routes.API + "/jobs/4/logs")
    assert reply["data"] == "h\u00e9llo\ufffd" and reply["next_offset"] == 0 + 7  # bytes as text; offset in bytes


async def test_bad_requests_are_json_errors_with_a_4xx_status():
    app = HttpApp(FakeBackend())
    api = routes.API
    cases = [
        ("GET", "/nope", b"", "", 404, "no route GET /nope"),
        ("GET", api + "/jobs/1/nope", b"", "", 404, "no route"),
        ("DELETE", api + "/jobs", b"", "", 405, "DELETE is not allowed on /api/v1/jobs: GET or POST"),
        ("POST", api + "/jobs", b"", "", 400, "needs a JSON object"),
        ("POST", api + "/jobs", b"{nope", "", 400, "the body is not JSON"),
        ("POST", api + "/jobs", b"[1]", "", 400, "the body must be a JSON object"),
        ("POST", api + "/jobs", b'{"spec": {}, "specs": []}', "", 400, "exactly one of spec"),
        ("POST", api + "/jobs/1/hold", b'{"x": 1}', "", 400, "takes no body"),
        ("GET", api + "/jobs", b"", "color=red", 400, "unknown query parameter(s) color"),
        ("GET", api + "/jobs", b"", "user=a&user=b", 400, "given twice"),
        ("GET", api + "/jobs/1/logs", b"", "offset=x", 400, "offset must be an integer"),
        ("GET", api + "/query", b"", "since=soon", 400, "since must be a number"),
    ]
    for method, path, body, query, status, text in cases:
        got, reply = await request(app, method, path, body, query)
        assert (got, set(reply)) == (status, {"error"}), (method, path, reply)
        assert text in reply["error"], reply


async def test_refusals_map_to_their_status():
    for exc, status in [(PermissionDenied("job 1 belongs to alice: bob may not cancel it"), 403),
                        (LocalProtocolError("unknown job '9'"), 404),
                        (LocalProtocolError("job 1 is not held"), 409),
                        (ValueError("slots must be positive"), 400),
                        (KeyError("spec"), 400),
                        (Unavailable("not the leader: the leader is ws://b:1"), 503)]:
        got, reply = await request(HttpApp(FakeBackend(raises=exc)), "POST", routes.API + "/jobs/1/release")
        assert got == status and reply == {"error": str(exc) if not isinstance(exc, KeyError) else "missing field 'spec'"}
    # In a submit's body an unknown job is a bad dependency, not the route's target: 409.
    assert error_of(LocalProtocolError("unknown job '9' in --after")).status == 409
    got, reply = await request(HttpApp(FakeBackend(raises=RuntimeError("boom"))), "GET", routes.API + "/status")
    assert got == 500 and reply == {"error": "the controller could not answer: RuntimeError: boom"}


async def test_credentials_are_checked_before_the_body_and_a_refusal_is_401():
    backend = FakeBackend(refuse="missing token")
    got, reply = await request(HttpApp(backend), "POST", routes.API + "/jobs", b"{nope")
    assert (got, reply) == (401, {"error": "missing token"}) and backend.calls == []


def test_the_munge_header_reaches_the_authenticator_as_a_handshake_would():
    shim = handshake_of({"headers": [(b"x-reckon-munge", b" MUNGE:abc: "), (b"accept", b"*/*")],
                         "client": ("10.0.0.5", 4000)})
    assert shim.headers[0] == (b"authorization", b"MUNGE MUNGE:abc:") and shim.path == "/client"
    assert shim.remote.address == "10.0.0.5"


async def test_the_status_page_and_the_document_need_no_credential():
    app = HttpApp(FakeBackend(refuse="missing token"))
    for path, needle in [("/", b"<title>reckon status</title>"), ("/status.js", b"sessionStorage"),
                         ("/status.css", b"@media")]:
        got, body = await request(app, "GET", path)
        assert got == 200 and needle in body
    got, document = await request(app, "GET", routes.API + "/openapi.json")
    assert got == 200 and document["info"]["title"] == "reckon HTTP API"


def test_a_query_parameter_that_does_not_parse_names_itself():
    with pytest.raises(HttpError, match="query parameter held must be true or false"):
        routes.parse_param(routes.Param("held", "boolean", ""), "maybe")


async def test_what_another_site_makes_a_browser_send_is_refused():
    backend = FakeBackend()
    app = HttpApp(backend)
    post = routes.API + "/jobs/1/cancel"
    got, reply = await request(app, "POST", post, headers=[("host", "127.0.0.1:7421"),
                                                           ("origin", "http://evil.example")])
    assert got == 403 and "cross-origin request refused" in reply["error"]
    got, reply = await request(app, "POST", post, headers=[("host", "127.0.0.1:7421"), ("origin", "null")])
    assert got == 403
    # A page rebound to loopback under its own name: same origin, but no credential and a DNS name.
    got, reply = await request(app, "POST", post, headers=[("host", "evil.example:7421"),
                                                           ("origin", "http://evil.example:7421")])
    assert got == 401 and "must name this host by its address" in reply["error"]
    assert backend.calls == []
    for headers in ([("host", "127.0.0.1:7421"), ("origin", "http://127.0.0.1:7421")],  # the page itself
                    [("host", "[::1]:7421")], [("host", "localhost:7421")],
                    [("host", "ctl.example:7421"), ("authorization", "Bearer x")]):  # a credential, any name
        got, reply = await request(app, "POST", post, headers=headers)
        assert got == 200, (headers, reply)


async def test_a_big_reply_is_the_same_json_off_the_event_loop():
    class Many(FakeBackend):
        async def call(self, op, fields, caller):
            return {"jobs": [{"id": str(i), "data": b"x"} for i in range(app_module.BIG_REPLY + 1)]}

    got, reply = await request(HttpApp(Many()), "GET", routes.API + "/jobs")
    assert got == 200 and len(reply["jobs"]) == app_module.BIG_REPLY + 1 and reply["jobs"][-1]["data"] == "x"
