"""The HTTP API's one route table: each route is a client operation of the WebSocket ``/client``
endpoint (the same op names and fields), and the OpenAPI document is generated from this table,
so the two cannot drift apart.

A route turns its path parameters, query string and JSON body into one op's fields; the
controller checks the fields (as it does for the WebSocket), so the table only parses what HTTP
carries as text (numbers, booleans, comma-separated lists).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from reckon.daemon.http.backend import HttpError

API = "/api/v1"
MAX_LOG_CHUNK_TEXT = "at most 1 MiB a read"  # the controller's MAX_OUTPUT_CHUNK (daemon/controller/logs.py)


@dataclass(frozen=True, slots=True)
class Param:
    """A query-string parameter: ``kind`` is string, integer, number, boolean or list (comma-separated)."""

    name: str
    kind: str
    doc: str
    field: str = ""  # the op's field ("" = name)


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str  # under API; "{job}", "{agent}", "{name}" are path parameters, each the op's field of that name
    op: str
    summary: str
    query: tuple[Param, ...] = ()
    body: dict[str, Any] | None = None  # the JSON body's schema (an object), None: no body
    body_required: bool = False
    # (path params, query fields, body) -> (op, fields) when the route picks its op by its body
    build: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], tuple[str, dict[str, Any]]] | None = None
    finish: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None  # (fields, reply) -> reply
    tag: str = "jobs"
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        regex = re.sub(r"\\\{(\w+)\\\}", lambda m: f"(?P<{m.group(1)}>[^/]+)", re.escape(API + self.path))
        object.__setattr__(self, "pattern", re.compile(regex + "$"))

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"\{(\w+)\}", self.path)


def parse_param(param: Param, text: str) -> Any:
    """One query parameter's value from its text; ``HttpError`` 400 naming it when it does not parse."""
    if param.kind == "string":
        return text
    if param.kind == "list":
        return [part for part in (p.strip() for p in text.split(",")) if part]
    if param.kind == "boolean":
        if text.lower() in ("1", "true", "yes"):
            return True
        if text.lower() in ("0", "false", "no"):
            return False
        raise HttpError(400, f"query parameter {param.name} must be true or false, got {text!r}")
    try:
        return int(text) if param.kind == "integer" else float(text)
    except ValueError:
        what = "an integer" if param.kind == "integer" else "a number"
        raise HttpError(400, f"query parameter {param.name} must be {what}, got {text!r}") from None


# ---- the routes' own builds ---------------------------------------------------------------

def _submit(path: dict[str, Any], query: dict[str, Any], body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """POST /jobs: one job (``spec``) or several all-or-none (``specs``)."""
    if ("spec" in body) == ("specs" in body):
        raise HttpError(400, "the body needs exactly one of spec (one job) or specs (several, all or none)")
    return ("submit" if "spec" in body else "submit_many"), body


def _logs_text(fields: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """A log chunk's bytes as text (UTF-8, undecodable bytes replaced), and where the next read starts."""
    data = reply.get("data")
    if isinstance(data, (bytes, bytearray)):
        reply = {**reply, "data": bytes(data).decode("utf-8", "replace"),
                 "next_offset": reply.get("offset", 0) + len(data)}
    return reply


def _array_members(fields: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """GET /arrays/ID: the query of that id, which must name an array."""
    [array] = fields["ids"]
    if reply.get("unknown"):
        raise HttpError(404, f"unknown job {array!r}")
    if any(job.get("array_id") != array for job in reply.get("jobs", ())):
        raise HttpError(409, f"job {array} is not an array")
    return reply


_STATE = Param("state", "string", "only jobs in this state (PENDING, RUNNING, COMPLETED, ...)")
_USER = Param("user", "string", "only this user's jobs")
_SPEC = {"$ref": "#/components/schemas/JobSpec"}

ROUTES: tuple[Route, ...] = (
    Route("GET", "/jobs", "jobs", "The jobs the controller holds", query=(_STATE, _USER)),
    Route("POST", "/jobs", "submit", "Submit one job (spec) or several, all or none (specs)", body_required=True,
          body={"type": "object", "properties": {
              "spec": _SPEC, "specs": {"type": "array", "items": _SPEC},
              "hold": {"type": "boolean", "description": "the job(s) start held"},
              "queue_anyway": {"type": "boolean", "description": "queue even if no agent can run it now"}}},
          build=_submit),
    Route("GET", "/jobs/{job}", "show", "One job, why it waits, and its attempts"),
    Route("POST", "/jobs/{job}/cancel", "cancel", "Cancel a job (an array's id: the whole array)",
          body={"type": "object", "properties": {"array": {"type": "boolean", "description": "the whole array"}}}),
    Route("POST", "/jobs/{job}/hold", "hold", "Hold a pending job"),
    Route("POST", "/jobs/{job}/release", "release", "Release a held job"),
    Route("POST", "/jobs/{job}/requeue", "requeue", "Requeue a job"),
    Route("POST", "/jobs/{job}/signal", "signal", "Send a signal to a running job's processes now", body_required=True,
          body={"type": "object", "required": ["signal"], "properties": {
              "signal": {"type": "integer", "description": "the signal's number"},
              "batch_only": {"type": "boolean", "description": "only the job's top process"}}}),
    Route("GET", "/jobs/{job}/logs", "logs", "A chunk of a job's output, from its agent", query=(
        Param("stream", "string", "stdout (default) or stderr"),
        Param("offset", "integer", "the byte to start at (default 0)"),
        Param("limit", "integer", f"bytes to read ({MAX_LOG_CHUNK_TEXT})"),
        Param("attempt", "integer", "which attempt (default: the latest)")), finish=_logs_text),
    Route("GET", "/jobs/{job}/history", "history", "A job's attempts and events, from the fact log"),
    Route("POST", "/arrays", "submit_array", "Submit a job array", body_required=True,
          body={"type": "object", "required": ["spec", "array"], "properties": {
              "spec": _SPEC, "array": {"type": "string", "description": "indices, e.g. 1-100%8"},
              "hold": {"type": "boolean"}, "queue_anyway": {"type": "boolean"}}}),
    Route("GET", "/arrays/{job}", "query", "The jobs of an array",
          build=lambda path, query, body: ("query", {"ids": [path["job"]]}), finish=_array_members),
    Route("GET", "/query", "query", "Jobs by id, name, user, state and time, live or finished", query=(
        Param("ids", "list", "job ids, comma-separated (an array's id: all its jobs)"),
        Param("names", "list", "job names, comma-separated"),
        Param("users", "list", "user names, comma-separated"),
        Param("states", "list", "states, comma-separated"),
        Param("since", "number", "ended (or submitted) at or after, seconds since the epoch"),
        Param("until", "number", "submitted at or before, seconds since the epoch"),
        Param("limit", "integer", "at most this many jobs"),
        Param("fields", "list", "only these keys of each job object, comma-separated (e.g. id,state); "
                                "default: whole objects"))),
    Route("GET", "/history", "history", "Finished jobs, oldest end first", query=(
        _USER, Param("since", "number", "ended at or after, seconds since the epoch"))),
    Route("GET", "/nodes", "nodes", "The nodes (agents): state and resources", tag="nodes"),
    Route("POST", "/nodes/{agent}/drain", "drain", "Drain a node: no new jobs (operators)", tag="nodes"),
    Route("POST", "/nodes/{agent}/resume", "resume", "Resume a drained node (operators)", tag="nodes"),
    Route("POST", "/nodes/{agent}/forget", "forget", "Forget a disconnected node: its jobs are requeued (operators)",
          tag="nodes"),
    Route("GET", "/jobs/{job}/priority", "priority", "A pending job's priority and its factors"),
    Route("POST", "/jobs/{job}/priority", "update", "Set an operator's priority adjustment of a job (operators)",
          body_required=True, body={"type": "object", "required": ["priority"],
                                    "properties": {"priority": {"type": "integer"}}}),
    Route("GET", "/pending", "pending", "Why pending jobs wait (Slurm's reason codes) and their priorities",
          query=(Param("ids", "list", "only these jobs (comma-separated ids); every pending job without it"),)),
    Route("GET", "/partitions", "partitions", "The partitions: their nodes, limits and state", tag="partitions"),
    Route("POST", "/partitions/{name}", "partition_set", "Change a partition at run time, or remove it (operators)",
          body_required=True, tag="partitions",
          body={"type": "object", "properties": {
              "changes": {"type": "array", "items": {"type": "array", "minItems": 2, "maxItems": 2},
                          "description": "[key, value] pairs as `reckon partition set` takes them"},
              "remove": {"type": "boolean"}}}),
    Route("GET", "/status", "status", "Job counts and the controller's state", tag="controller"),
    Route("GET", "/whoami", "whoami", "Who the controller takes the caller for", tag="controller"),
)


def match(method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    """The route of ``method path`` and its path parameters; ``HttpError`` 405 when only the
    method is wrong; None when no route has the path."""
    allowed = []
    for route in ROUTES:
        found = route.pattern.match(path)
        if found is not None:
            if route.method == method:
                return route, found.groupdict()
            allowed.append(route.method)
    if allowed:
        raise HttpError(405, f"{method} is not allowed on {path}: {' or '.join(sorted(set(allowed)))}")
    return None


def fields_of(route: Route, path: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> tuple[str, dict]:
    """The op and its fields for one request to ``route``."""
    known = {p.name: p for p in route.query}
    unknown = sorted(set(query) - set(known))
    if unknown:
        raise HttpError(400, f"unknown query parameter(s) {', '.join(unknown)} for {route.method} {API}{route.path}"
                             + (f"; it takes {', '.join(known)}" if known else ""))
    parsed = {known[name].field or name: parse_param(known[name], text) for name, text in query.items()}
    if route.build is not None:
        return route.build(path, parsed, body)
    return route.op, {**body, **parsed, **path}


# ---- OpenAPI 3.1 ----------------------------------------------------------------------------

_PATH_PARAMS = {"job": "a job id", "agent": "a node's (agent's) name", "name": "a partition's name"}
_ANY_OBJECT = {"type": "object", "additionalProperties": True}
_SCHEMAS = {
    "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}},
              "description": "every refusal and bad request: one line"},
    "JobSpec": {"type": "object", "required": ["name", "command", "slots"], "additionalProperties": True,
                "description": "a job's spec in its wire form (JobSpec.to_dict: fields at their default left out)",
                "properties": {"name": {"type": "string"}, "command": {"type": "array", "items": {"type": "string"}},
                               "cwd": {"type": ["string", "null"]},
                               "env": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
                               "slots": {"type": "integer", "minimum": 1}, "time_limit": {"type": ["number", "null"]},
                               "retries": {"type": "integer"}, "mem": {"type": "integer"},
                               "gpus": {"type": "integer"}, "script": {"type": "string"}}},
    "Reply": {**_ANY_OBJECT, "description": "the operation's reply, as over the WebSocket (without ok)"},
}
_ERRORS = {"400": "a bad request", "401": "no or bad credentials", "403": "not permitted (one line naming why)",
           "404": "no such job, node or route", "409": "refused in the job's or node's current state",
           "503": "this controller is a standby: the error names the leader"}


def openapi(version: str = "0") -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``ROUTES``."""
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        params: list[dict[str, Any]] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"},
             "description": _PATH_PARAMS[name]} for name in route.path_params]
        for p in route.query:
            schema: dict[str, Any] = {"type": "string"} if p.kind == "list" else {"type": p.kind}
            params.append({"name": p.name, "in": "query", "required": False, "schema": schema, "description": p.doc})
        operation: dict[str, Any] = {
            "operationId": f"{route.op}_{route.method.lower()}_{re.sub(r'[^a-z]+', '_', route.path).strip('_')}",
            "summary": route.summary, "tags": [route.tag], "description": f"The client operation `{route.op}`.",
            "responses": {"200": {"description": "the operation's reply",
                                  "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Reply"}}}},
                          **{code: {"description": text, "content": {"application/json": {
                              "schema": {"$ref": "#/components/schemas/Error"}}}} for code, text in _ERRORS.items()}},
        }
        if params:
            operation["parameters"] = params
        if route.body is not None:
            operation["requestBody"] = {"required": route.body_required,
                                        "content": {"application/json": {"schema": route.body}}}
        paths.setdefault(API + route.path, {})[route.method.lower()] = operation
    paths[API + "/openapi.json"] = {"get": {
        "operationId": "openapi_document", "summary": "This document", "tags": ["controller"], "security": [],
        "responses": {"200": {"description": "the OpenAPI 3.1 document",
                              "content": {"application/json": {"schema": _ANY_OBJECT}}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "reckon HTTP API", "version": version,
                 "description": "The WebSocket client operations of a reckon controller over HTTP/JSON "
                                "(docs/http-api.md)."},
        "paths": paths,
        "components": {"schemas": _SCHEMAS, "securitySchemes": {
            "token": {"type": "http", "scheme": "bearer", "description": "token mode: the controller's token"},
            "munge": {"type": "apiKey", "in": "header", "name": "X-Reckon-Munge",
                      "description": "munge mode: a fresh MUNGE credential per request (`munge -n`)"}}},
        "security": [{"token": []}, {"munge": []}],
    }
