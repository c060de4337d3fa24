"""``reckon.Client``: the controller's client operations from Python, blocking (docs/python-api.md).

On the command line's own client (``daemon/blocking/``: one WebSocket per call, no trio, no model),
with its settings resolved as the CLI resolves them (``--controller``, ``$RECKON_CONTROLLER``; the
token from ``$RECKON_TOKEN_FILE`` / ``$RECKON_TOKEN``; ``$RECKON_AUTH=munge``; ``$RECKON_CA``) and
its errors (reckon/errors.py).  A job spec is the plain wire dict (daemon/blocking/spec.py); the
controller checks it and refuses a bad one in one line (``Refused``).
"""

from __future__ import annotations

import os
import time

from reckon.daemon.blocking.client import SyncClient
from reckon.daemon.blocking.spec import check_array, job_spec
from reckon.daemon.client_common import (Refused, Unreachable, UsageError, client_ssl_context, resolve_auth,
                                         resolve_ca, resolve_controller)
from reckon.daemon.auth.client import ClientAuth
from reckon.job import Job

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any, Iterable, Mapping, Sequence

    JobRef = str | int | Job

FIRST_POLL = 0.05  # seconds: wait's first look again; doubling to POLL_CAP
POLL_CAP = 1.0


def _id(job: JobRef) -> str:
    if isinstance(job, Job):
        return job.id
    if isinstance(job, str) and job:
        return job
    if isinstance(job, int) and not isinstance(job, bool):
        return str(job)
    raise UsageError(f"a job is a reckon.Job or its id, got {job!r}")


def _seconds(value: float | str | None, what: str) -> float | None:
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        from reckon.daemon.durations import parse_seconds  # "10m", "1h30m"

        try:
            return parse_seconds(value)
        except ValueError as exc:
            raise UsageError(f"bad {what} {value!r}: {exc}") from None
    raise UsageError(f"{what} is a number of seconds or a duration such as '10m', got {value!r}")


class Client:
    """A controller's client.  Every argument left out is resolved as the ``reckon`` command does::

        import reckon
        c = reckon.Client()                       # $RECKON_CONTROLLER, else ws://127.0.0.1:7420
        job = c.submit(["python", "train.py"], cpus=4, mem="8G", time_limit="2h")
        print(c.wait(job).state)

    ``controller``: one URL, or several separated by commas (standby controllers: the leader is
    found). ``token``: the shared token itself; ``token_file``: a file holding it. ``auth``:
    ``"token"`` or ``"munge"``. ``ca``: a PEM file trusted for a ``wss://`` controller.
    ``timeout``: seconds to connect and then for each request.
    Each call is a connection of its own, so a client outlives a controller restart.
    """

    def __init__(self, controller: str | None = None, token: str | None = None, *, token_file: str | None = None,
                 auth: str | None = None, munge_socket: str | None = None, ca: str | os.PathLike[str] | None = None,
                 timeout: float = 10.0) -> None:
        self.controller = resolve_controller(controller)
        if token is not None:
            if (auth or os.environ.get("RECKON_AUTH") or "token") != "token":
                raise UsageError("token is for auth='token' (munge mode sends a MUNGE credential, not a token)")
            self._auth = ClientAuth(mode="token", token=token)
        else:
            self._auth = resolve_auth(auth, munge_socket, token_file)
        wss = any(u.strip().startswith("wss:") for u in self.controller.split(","))
        self._tls = client_ssl_context(resolve_ca(ca)) if wss else None
        self.timeout = timeout
        self._query = True  # whether the controller may have the query op (learnt on first refusal)
        SyncClient(self.controller, None)  # the URLs checked now: a UsageError before any call

    def __repr__(self) -> str:
        return f"reckon.Client({self.controller!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None  # no connection is kept between calls

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """One request of the controller's client protocol (docs/protocol.md), its reply as a dict."""
        with SyncClient(self.controller, self._auth, timeout=self.timeout, ssl_context=self._tls) as client:
            return client.call(op, **fields)

    # ---- submitting ---------------------------------------------------------------------------

    def spec(self, command: Sequence[str], *, name: str | None = None, cpus: int = 1, mem: int | str | None = None,
             gpus: int = 0, gres: Iterable[str] | Mapping[str, int] = (), time_limit: float | str | None = None,
             retries: int = 0, retry_on_exit: Iterable[int] = (), cwd: str | None = None,
             env: dict[str, str] | Iterable[tuple[str, str]] | None = None, output: str | None = None,
             error: str | None = None, after: Iterable[JobRef] = (), **fields: Any) -> dict[str, Any]:
        """The wire dict of a job (what ``submit`` sends): see ``submit`` for the arguments."""
        if isinstance(command, (str, bytes)):
            raise UsageError(f"command is a list of words, such as ['sh', '-c', {command!r}], not a string")
        try:
            here = os.path.abspath(cwd) if cwd else os.getcwd()
        except FileNotFoundError:  # the current directory was removed
            raise UsageError("the current directory no longer exists: give cwd (absolute)") from None
        try:
            return job_spec(list(command), name=name, cwd=here,
                            env=dict(env) if isinstance(env, dict) else list(env or ()), cpus=cpus, mem=mem,
                            gpus=gpus, gres=dict(gres) if isinstance(gres, dict) else list(gres),
                            time_limit=_seconds(time_limit, "time_limit"), retries=retries,
                            retry_on_exit=list(retry_on_exit), after=[_id(j) for j in after], output=output,
                            error=error, **fields)
        except ValueError as exc:
            raise UsageError(f"invalid job: {exc}") from None

    def submit(self, command: Sequence[str], *, name: str | None = None, cpus: int = 1, mem: int | str | None = None,
               gpus: int = 0, gres: Iterable[str] | Mapping[str, int] = (), time_limit: float | str | None = None,
               retries: int = 0, retry_on_exit: Iterable[int] = (), cwd: str | None = None,
               env: dict[str, str] | Iterable[tuple[str, str]] | None = None, output: str | None = None,
               error: str | None = None, after: Iterable[JobRef] = (), hold: bool = False,
               queue_anyway: bool = False, **fields: Any) -> Job:
        """Submit one job; its ``Job`` as the controller recorded it (PENDING).

        ``command``: the program and its arguments (a list; a shell line is ``["sh", "-c", line]``).
        ``cpus``, ``mem`` (bytes, or ``"512M"``, ``"4G"``), ``gpus``, ``gres`` (``["license:2"]`` or
        ``{"license": 2}``): what it takes on its agent.  ``time_limit``: seconds or ``"10m"``.
        ``cwd``: default the current directory.  ``env``: variables added to the job's environment.
        ``output``/``error``: file patterns on the agent (``%j`` job id, ``%a`` attempt).  ``after``:
        jobs that must COMPLETE first.  ``hold``: it starts held (``release`` lets it run).
        ``fields``: further spec fields of newer controllers, sent as given.
        """
        spec = self.spec(command, name=name, cpus=cpus, mem=mem, gpus=gpus, gres=gres, time_limit=time_limit,
                         retries=retries, retry_on_exit=retry_on_exit, cwd=cwd, env=env, output=output,
                         error=error, after=after, **fields)
        extra = _submit_extra(hold, queue_anyway)
        job = Job(self.call("submit", spec=spec, **extra)["job"])
        return self._held(job) if hold else job

    def submit_array(self, command: Sequence[str], array: str, *, hold: bool = False, queue_anyway: bool = False,
                     **spec: Any) -> list[Job]:
        """One job per index of ``array`` (``"1-100"``, ``"0-9:2%3"``: ``%3`` at most three at once; a list
        as Slurm's ``--array``, ``"1,3,5-9:2"``);
        each gets ``RECKON_ARRAY_INDEX``; the first job's id names the array.  ``spec``: as ``submit``'s."""
        try:
            check_array(array)
        except ValueError as exc:
            raise UsageError(f"invalid array: {exc}") from None
        reply = self.call("submit_array", spec=self.spec(command, **spec), array=array,
                          **_submit_extra(hold, queue_anyway))
        jobs = self._jobs_of([str(i) for i in reply["jobs"]])
        return [self._held(j) for j in jobs] if hold else jobs

    def submit_many(self, jobs: Iterable[Sequence[str] | dict[str, Any]], *, hold: bool = False,
                    queue_anyway: bool = False, **common: Any) -> list[Job]:
        """Many jobs in one request (one group commit: all are recorded, or none).  Each item is a
        command (a list of words) or a dict of ``submit``'s keywords with its ``command``; ``common``
        are keywords every item gets unless it says otherwise."""
        specs = []
        for item in jobs:
            if isinstance(item, (list, tuple)):
                specs.append(self.spec(item, **common))
            elif isinstance(item, dict):
                fields = {**common, **item}
                if "command" not in fields:
                    raise UsageError(f"a job of submit_many needs its command: {item!r:.200}")
                specs.append(self.spec(fields.pop("command"), **fields))
            else:
                raise UsageError(f"a job of submit_many is a command (a list) or a dict, got {item!r:.200}")
        if not specs:
            return []
        reply = self.call("submit_many", specs=specs, **_submit_extra(hold, queue_anyway))
        done = self._jobs_of([str(i) for i in reply["jobs"]])
        return [self._held(j) for j in done] if hold else done

    def _held(self, job: Job) -> Job:
        """A controller before protocol 7 ignores a submit's ``hold``: the job is held right after,
        and if it was dispatched in between, that is said in one line (it was submitted)."""
        if job.held:
            return job
        try:
            return self.hold(job)
        except Refused as exc:
            raise Refused(f"the controller does not hold at submit (a protocol before 7): job {job.id} was "
                          f"submitted, and holding it after failed: {exc}") from None

    # ---- reading --------------------------------------------------------------------------------

    def job(self, job: JobRef) -> Job:
        """The job as the controller has it now (``Refused`` for an unknown id)."""
        return Job(self.call("show", job=_id(job))["job"])

    def jobs(self, state: str | None = None, user: str | None = None) -> list[Job]:
        """Every job the controller holds (of ``state``, of ``user``), arrays expanded."""
        return [Job(j) for j in self.call("jobs", state=state, user=user)["jobs"]]

    def query(self, ids: Iterable[JobRef] | None = None, *, names: Iterable[str] | None = None,
              users: Iterable[str] | None = None, states: Iterable[str] | None = None,
              since: float | None = None, until: float | None = None, limit: int | None = None,
              fields: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Jobs by id (an array's id: its members), name, user, state and time window, in submit
        order, as the ``query`` op's job objects; ``fields``: only these keys of each (``["id",
        "state"]``: a poll's reply a tenth the size), None: whole objects.  A controller before the
        query op refuses (``Refused``, "unknown op")."""
        def listed(values: Iterable[Any] | None) -> list[Any] | None:
            return None if values is None else [str(v) for v in values]

        return self.call("query", ids=None if ids is None else [_id(j) for j in ids], names=listed(names),
                         users=listed(users), states=listed(states), since=since, until=until, limit=limit,
                         fields=listed(fields))["jobs"]

    def _jobs_of(self, ids: list[str]) -> list[Job]:
        """These jobs, in this order: one ``query`` (a controller that has the op), else a ``show``
        each on one connection, or one whole listing for many."""
        listed: list[dict[str, Any]] | None = None
        if len(ids) > 1 and self._query:
            try:
                listed = self.call("query", ids=ids)["jobs"]
            except Refused as exc:
                if "unknown op" not in str(exc):
                    raise
                self._query = False  # a controller before the query op: not asked again
        if listed is None and len(ids) > 20:
            wanted = set(ids)
            listed = [j for j in self.call("jobs")["jobs"] if j["id"] in wanted]
        if listed is not None:
            found = {j["id"]: j for j in listed}
            missing = [i for i in ids if i not in found]
            if missing:
                raise Refused(f"the controller does not list job(s) {', '.join(missing[:10])}")
            return [Job(found[i]) for i in ids]
        with SyncClient(self.controller, self._auth, timeout=self.timeout, ssl_context=self._tls) as client:
            return [Job(client.call("show", job=i)["job"]) for i in ids]

    def wait(self, jobs: JobRef | Iterable[JobRef], timeout: float | None = None) -> Any:
        """Wait until the job (or every job of a list) has ended; the ended ``Job`` (or a list of them).

        It keeps waiting while the controller is unreachable (a restart, a failover to a standby:
        each look is a new connection, so the leader is found again); ``TimeoutError`` after
        ``timeout`` seconds (None: no limit).  A refusal (an unknown job) is raised at once.
        """
        one = isinstance(jobs, (str, Job, int))
        if isinstance(jobs, (str, Job, int)):
            ids = [_id(jobs)]
        else:
            ids = [_id(j) for j in jobs]
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = FIRST_POLL
        ended: dict[str, Job] = {}
        last: Exception | None = None
        while True:
            try:
                for job in self._jobs_of([i for i in ids if i not in ended]):
                    if job.done:
                        ended[job.id] = job
                last = None
            except Unreachable as exc:  # the controller restarting, or another taking over: look again
                last = exc
            if len(ended) == len(ids):
                return ended[ids[0]] if one else [ended[i] for i in ids]
            if deadline is not None and time.monotonic() + pause > deadline:
                waiting = [i for i in ids if i not in ended]
                why = f" (last: {last})" if last is not None else ""
                raise TimeoutError(f"job(s) {', '.join(waiting[:10])} not ended within {timeout:g}s{why}")
            time.sleep(pause)
            pause = min(pause * 2, POLL_CAP)

    def logs(self, job: JobRef, stream: str = "stdout", *, attempt: int | None = None) -> bytes:
        """A job's output as its agent has it now (``stream``: ``"stdout"`` or ``"stderr"``), as bytes.

        ``Refused`` with the reason when there is none to read yet (not started, its agent
        disconnected) or no more (deleted by the agent's retention)."""
        if stream not in ("stdout", "stderr"):
            raise UsageError(f"stream is 'stdout' or 'stderr', got {stream!r}")
        chunks: list[bytes] = []
        offset = 0
        with SyncClient(self.controller, self._auth, timeout=self.timeout, ssl_context=self._tls) as client:
            while True:
                reply = client.call("logs", job=_id(job), attempt=attempt, stream=stream, offset=offset)
                if reply.get("waiting") is not None:
                    raise Refused(str(reply["waiting"]))
                attempt = reply["attempt"]  # the chunks of one attempt, as the first chunk named it
                data = bytes(reply["data"])
                if not data:
                    return b"".join(chunks)
                chunks.append(data)
                offset += len(data)

    def history(self, job: JobRef | None = None, *, user: str | None = None,
                since: float | None = None) -> Any:
        """A job's attempts and events (a dict, ``reckon history --json``'s); without a job, the
        ended jobs (of ``user``, ended since the Unix time ``since``) with their usage, as ``Job``s."""
        if job is not None:
            if user is not None or since is not None:
                raise UsageError("user and since list ended jobs: give them without a job")
            return self.call("history", job=_id(job))["history"]
        return [Job(j) for j in self.call("history", user=user, since=since)["jobs"]]

    def nodes(self) -> list[dict[str, Any]]:
        """The agents (``reckon nodes --json``'s objects)."""
        return list(self.call("nodes")["nodes"])

    def whoami(self) -> dict[str, Any]:
        """Who the controller takes this client for (``reckon whoami --json``)."""
        return self.call("whoami")

    # ---- acting on a job ------------------------------------------------------------------------

    def cancel(self, job: JobRef, *, array: bool | None = None) -> Job:
        """Cancel a job (an array's id: the whole array, unless ``array=False``); the job as now
        (a RUNNING one shows ``cancel_requested`` until its agent has stopped it)."""
        return Job(self.call("cancel", job=_id(job), array=array)["job"])

    def hold(self, job: JobRef) -> Job:
        """Keep a PENDING job from being dispatched until ``release``."""
        return Job(self.call("hold", job=_id(job))["job"])

    def release(self, job: JobRef) -> Job:
        return Job(self.call("release", job=_id(job))["job"])

    def requeue(self, job: JobRef) -> Job:
        """Run a job again as a new attempt (as ``reckon requeue`` does)."""
        return Job(self.call("requeue", job=_id(job))["job"])


def _submit_extra(hold: bool, queue_anyway: bool) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if hold:
        extra["hold"] = True
    if queue_anyway:
        extra["queue_anyway"] = True
    return extra
