"""The agent's durable local job records and completion outbox.

The model says what to write (``StoreRecord``, ``DeleteRecord``,
``OutboxPut``, ``OutboxDelete``); this module only makes a list of those
durable in one transaction.  The daemon must let ``apply`` return before it
sends anything those commands back (a completion is on disk before it is
ever sent, and leaves only after an ack).

Records keep their first-insertion order (an upsert keeps the rowid), so a
restarted agent sees them in the order its model had them.

The ``meta`` table also holds the agent's identity (``claim_identity``): a
random id made on the first start and the name it was made under.  A state
directory belongs to that agent; starting it under another name is refused.
It also holds the machine the directory belongs to (``claim_machine``,
daemon/store/machine.py): a copy started on another machine is refused.
"""

from __future__ import annotations

import secrets
import sqlite3
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any, Sequence

import cbor2

from reckon.model import events as E
from reckon.model.agent import LocalJob, LocalStatus
from reckon.model.jobs import JobSpec
from reckon.model.messages import Finished
from reckon.model.resources import Owner, Usage

from reckon.daemon.store.machine import MachineClaim, MachineId, decide
from reckon.daemon.store.statelock import WrongStateDir
from reckon.daemon.store.sqlite_thread import RowStatement, SqliteThread, StoreError, transaction

SCHEMA_VERSION = 4  # 2: local_job.uid and outbox.uid (the submission a dispatch was for); 3: timed_out; 4: extra
_SCHEMA = (
    """CREATE TABLE local_job (
        job TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        spec BLOB,                 -- CBOR of JobSpec.to_dict(), or NULL when the agent never had it
        status TEXT NOT NULL,      -- LocalStatus value
        started_at REAL,
        exit_code INTEGER,
        signal INTEGER,
        finished_at REAL,
        acked INTEGER NOT NULL,    -- 0 / 1
        uid TEXT,                  -- the submission's uid (NULL: the controller sent none)
        timed_out INTEGER NOT NULL DEFAULT 0,  -- 0 / 1: stopped at its time limit by its supervisor
        extra BLOB,                -- CBOR map of protocol 6's fields not at their defaults (owner, gpus, usage, oom), or NULL
        PRIMARY KEY (job, attempt))""",
    """CREATE TABLE outbox (
        job TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        exit_code INTEGER,
        signal INTEGER,
        finished_at REAL NOT NULL,
        started_at REAL,
        uid TEXT,
        timed_out INTEGER NOT NULL DEFAULT 0,
        extra BLOB,                -- as local_job.extra (usage, oom)
        PRIMARY KEY (job, attempt))""",
    """CREATE TABLE meta (
        key TEXT PRIMARY KEY,      -- 'cluster': the controller history the records belong to;
                                   -- 'identity', 'name': who this agent is (claim_identity)
                                   -- 'machine': the machine the directory belongs to (claim_machine)
                                   -- 'generation': the last join generation (StoreGeneration)
        value TEXT NOT NULL)""",
)

# Upgrades of an existing agent.db, by the version they start from.
_MIGRATIONS = {
    1: ("ALTER TABLE local_job ADD COLUMN uid TEXT", "ALTER TABLE outbox ADD COLUMN uid TEXT"),
    2: ("ALTER TABLE local_job ADD COLUMN timed_out INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE outbox ADD COLUMN timed_out INTEGER NOT NULL DEFAULT 0"),
    3: ("ALTER TABLE local_job ADD COLUMN extra BLOB", "ALTER TABLE outbox ADD COLUMN extra BLOB"),
}

_RECORD_COLS = "job, attempt, spec, status, started_at, exit_code, signal, finished_at, acked, uid, timed_out, extra"
_OUTBOX_COLS = "job, attempt, exit_code, signal, finished_at, started_at, uid, timed_out, extra"
# Each a statement over many rows (see RowStatement: one step per chunk, not per row).
_PUT_RECORD = RowStatement(
    f"INSERT INTO local_job ({_RECORD_COLS}) VALUES ", "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    " ON CONFLICT (job, attempt) DO UPDATE SET spec = excluded.spec, status = excluded.status, "
    "started_at = excluded.started_at, exit_code = excluded.exit_code, signal = excluded.signal, "
    "finished_at = excluded.finished_at, acked = excluded.acked, uid = excluded.uid, timed_out = excluded.timed_out, "
    "extra = excluded.extra",
)
_DELETE_RECORD = RowStatement("DELETE FROM local_job WHERE (job, attempt) IN (VALUES ", "(?, ?)", ")")
_PUT_OUTBOX = RowStatement(
    f"INSERT INTO outbox ({_OUTBOX_COLS}) VALUES ", "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
    " ON CONFLICT (job, attempt) DO UPDATE SET exit_code = excluded.exit_code, signal = excluded.signal, "
    "finished_at = excluded.finished_at, started_at = excluded.started_at, uid = excluded.uid, "
    "timed_out = excluded.timed_out, extra = excluded.extra",
)
_DELETE_OUTBOX = RowStatement("DELETE FROM outbox WHERE (job, attempt) IN (VALUES ", "(?, ?)", ")")
_PUT_META = RowStatement("INSERT INTO meta (key, value) VALUES ", "(?, ?)",
                         " ON CONFLICT (key) DO UPDATE SET value = excluded.value")

StoreCommand = E.StoreRecord | E.DeleteRecord | E.OutboxPut | E.OutboxDelete | E.StoreCluster | E.StoreGeneration


class AgentStore:
    def __init__(self, db: SqliteThread) -> None:
        self.db = db  # public for inspection (tests, diagnostics); use only through db.run

    @classmethod
    async def open(cls, state_dir: Path) -> "AgentStore":
        """Open (creating if needed) ``state_dir/agent.db``."""
        db = await SqliteThread.open(Path(state_dir) / "agent.db", name="reckon-sqlite-agent",
                                     version=SCHEMA_VERSION, ddl=_SCHEMA, migrations=_MIGRATIONS)
        return cls(db)

    async def load(self) -> tuple[list[LocalJob], list[Finished]]:
        """The records and the outbox, for ``Agent(config, records, outbox)``."""
        return await self.db.run(_load, self.db.path)

    async def load_cluster(self) -> str | None:
        """The controller history this agent's records belong to (None: never joined)."""
        return await self.db.run(_load_meta, "cluster")

    async def load_generation(self) -> int:
        """The last join generation a controller's Welcome gave this agent (0: none yet)."""
        value = await self.db.run(_load_meta, "generation")
        try:
            return 0 if value is None else int(value)
        except ValueError:
            raise StoreError(f"{self.db.path}: meta 'generation' is not a number: {value!r}") from None

    async def claim_identity(self, name: str) -> str:
        """This agent's durable identity, made (with ``name``) on the first start.

        ``WrongStateDir`` if the directory was first used under another name: two
        names sharing one directory's records, or an operator's typo, must not
        start (the records and the identity belong to the first name).
        """
        return await self.db.run(_claim_identity, name, secrets.token_hex(16), self.db.path)

    async def claim_machine(self, machine: MachineId, moved_from: str | None = None) -> MachineClaim:
        """Check (and record, when new, upgraded or moved) the machine this directory belongs to.

        Call it before ``claim_identity``.  ``CopiedStateDir`` if it belongs to
        another machine (or ``moved_from`` is not the recorded one): nothing is
        written then.
        """
        return await self.db.run(_claim_machine, machine, moved_from, self.db.path)

    async def apply(self, commands: Sequence[StoreCommand]) -> None:
        """Make the commands durable in one transaction (all or none) before returning."""
        ops = [_op(command) for command in commands]  # check everything before touching the database
        if ops:
            await self.db.run(_apply, ops)

    async def aclose(self) -> None:
        await self.db.aclose()

    async def __aenter__(self) -> "AgentStore":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _op(command: Any) -> tuple[RowStatement, tuple]:
    """One command as (SQL, parameters); ``TypeError`` for anything that is not a store command."""
    if isinstance(command, E.StoreRecord):
        r = command.record
        if not isinstance(r, LocalJob):
            raise TypeError(f"StoreRecord must carry a LocalJob, not {type(r).__name__}")
        spec = None if r.spec is None else cbor2.dumps(r.spec.to_dict())
        return _PUT_RECORD, (r.job, r.attempt, spec, r.status.value, r.started_at, r.exit_code, r.signal,
                             r.finished_at, int(r.acked), r.uid, int(r.timed_out), _extra(r))
    if isinstance(command, E.DeleteRecord):
        return _DELETE_RECORD, (command.job, command.attempt)
    if isinstance(command, E.OutboxPut):
        f = command.report
        if not isinstance(f, Finished):
            raise TypeError(f"OutboxPut must carry a Finished report, not {type(f).__name__}")
        return _PUT_OUTBOX, (f.job, f.attempt, f.exit_code, f.signal, f.finished_at, f.started_at, f.uid,
                             int(f.timed_out), _extra(f))
    if isinstance(command, E.OutboxDelete):
        return _DELETE_OUTBOX, (command.job, command.attempt)
    if isinstance(command, E.StoreCluster):
        return _PUT_META, ("cluster", command.cluster)
    if isinstance(command, E.StoreGeneration):
        return _PUT_META, ("generation", str(command.generation))
    raise TypeError(f"the agent store does not apply {type(command).__name__}")


# ---- on the database thread ------------------------------------------------------


def _apply(conn: sqlite3.Connection, ops: list[tuple[RowStatement, tuple]]) -> None:
    """In order; a run of the same kind of write is one statement (a later row wins, as it would)."""
    with transaction(conn):
        for statement, run in groupby(ops, key=itemgetter(0)):
            statement.run(conn, [params for _, params in run])


def _claim_identity(conn: sqlite3.Connection, name: str, fresh: str, path: Path) -> str:
    with transaction(conn):
        rows = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('identity', 'name')").fetchall())
        if "identity" not in rows:
            conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [("identity", fresh), ("name", name)])
            return fresh
    if rows.get("name") != name:
        raise WrongStateDir(f"{path.parent} belongs to agent {rows.get('name')!r}, not {name!r}: start it as "
                            f"--name {rows.get('name')}, or give {name!r} a state directory of its own")
    return rows["identity"]


def _claim_machine(conn: sqlite3.Connection, machine: MachineId, moved_from: str | None,
                   path: Path) -> MachineClaim:
    with transaction(conn):
        rows = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('identity', 'machine')").fetchall())
        claim = decide(state_dir=path.parent, recorded=rows.get("machine"), has_identity="identity" in rows,
                       machine=machine, moved_from=moved_from)  # CopiedStateDir: the transaction writes nothing
        if claim.record is not None:
            _PUT_META.run(conn, [("machine", claim.record)])
    return claim


def _load_meta(conn: sqlite3.Connection, key: str) -> str | None:
    with transaction(conn, write=False):
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def _load(conn: sqlite3.Connection, path: Path) -> tuple[list[LocalJob], list[Finished]]:
    with transaction(conn, write=False):
        records = [_record(row, path) for row in conn.execute(
            f"SELECT {_RECORD_COLS} FROM local_job ORDER BY rowid")]
        outbox = [_report(row, path) for row in conn.execute(
            f"SELECT {_OUTBOX_COLS} FROM outbox ORDER BY rowid")]
    return records, outbox


def _check_key(job: Any, attempt: Any) -> None:
    if not isinstance(job, str) or not job or not isinstance(attempt, int) or attempt < 1:
        raise ValueError("bad job id or attempt")


def _record(row: tuple, path: Path) -> LocalJob:
    job, attempt, spec, status, started_at, exit_code, signal, finished_at, acked, uid, timed_out, extra = row
    try:
        _check_key(job, attempt)
        if acked not in (0, 1):
            raise ValueError(f"acked is {acked!r}")
        record = LocalJob(
            job=job, attempt=attempt, spec=None if spec is None else JobSpec.from_dict(cbor2.loads(spec)),
            status=LocalStatus(status), started_at=started_at, exit_code=exit_code, signal=signal,
            finished_at=finished_at, acked=bool(acked), uid=uid, timed_out=bool(timed_out),
            **_read_extra(extra, ("owner", "gpus", "usage", "oom", "not_run")),
        )
        if record.status is LocalStatus.FINISHED:
            _finished(record)  # validates the outcome fields the way the wire does
    except Exception as exc:
        raise StoreError(f"{path}: local job record ({job!r}, {attempt!r}) is corrupt: {exc}") from exc
    return record


def _finished(r: LocalJob) -> Finished:
    return Finished(job=r.job, attempt=r.attempt, exit_code=r.exit_code, signal=r.signal,
                    finished_at=r.finished_at, started_at=r.started_at, uid=r.uid,  # type: ignore[arg-type]
                    timed_out=r.timed_out, usage=r.usage, oom=r.oom, not_run=r.not_run)


def _extra(r: LocalJob | Finished) -> bytes | None:
    """Protocol 6's fields (and 7's not_run) of a record or a report, those not at their defaults, as one CBOR map."""
    out: dict[str, Any] = {}
    if getattr(r, "owner", None) is not None:
        out["owner"] = r.owner.to_dict()  # type: ignore[union-attr]
    if getattr(r, "gpus", ()):
        out["gpus"] = list(r.gpus)  # type: ignore[union-attr]
    if r.usage is not None:
        out["usage"] = r.usage.to_dict()
    if r.oom:
        out["oom"] = True
    if r.not_run is not None:
        out["not_run"] = r.not_run
    return cbor2.dumps(out) if out else None


def _read_extra(blob: bytes | None, allowed: tuple[str, ...]) -> dict[str, Any]:
    if blob is None:
        return {}
    data = cbor2.loads(blob)
    if not isinstance(data, dict) or not set(data) <= set(allowed):
        raise ValueError(f"extra is not a map of {', '.join(allowed)}")
    if "gpus" in data:
        data["gpus"] = tuple(data["gpus"])
    if "usage" in data:
        data["usage"] = Usage.from_dict(data["usage"])
    if "owner" in data:
        data["owner"] = Owner.from_dict(data["owner"])
    return data


def _report(row: tuple, path: Path) -> Finished:
    job, attempt, exit_code, signal, finished_at, started_at, uid, timed_out, extra = row
    try:
        _check_key(job, attempt)
        return Finished(job=job, attempt=attempt, exit_code=exit_code, signal=signal, finished_at=finished_at,
                        started_at=started_at, uid=uid, timed_out=bool(timed_out),
                        **_read_extra(extra, ("usage", "oom", "not_run")))
    except Exception as exc:
        raise StoreError(f"{path}: outbox entry ({job!r}, {attempt!r}) is corrupt: {exc}") from exc
