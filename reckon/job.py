"""``reckon.Job``: a job as the controller described it at one moment (read-only)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

STATES = ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED")
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED"})


class Job:
    """One job object of the controller (``reckon show --json``'s), with typed attributes.

    A snapshot: it never changes; ``Client.job(job.id)`` or ``Client.wait(job)`` gives a newer one.
    ``to_dict()`` is the controller's whole object, fields this class does not name included.
    A plain class with slots, not a dataclass: ``import reckon`` stays as light as the CLI.
    """

    __slots__ = ("_data",)
    _data: dict[str, Any]

    def __init__(self, data: dict[str, Any]) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or "state" not in data:
            raise ValueError(f"not a job object: {data!r:.200}")
        object.__setattr__(self, "_data", dict(data))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"reckon.Job is read-only (cannot set {name!r}): ask the Client for a newer one")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("reckon.Job is read-only")

    def __repr__(self) -> str:
        extra = f", exit_code={self.exit_code}" if self.exit_code is not None else ""
        return f"Job(id={self.id!r}, name={self.name!r}, state={self.state!r}{extra})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other._data == self._data

    def __hash__(self) -> int:
        return hash((self.id, self.state, self.attempt))

    def to_dict(self) -> dict[str, Any]:
        """The controller's job object (a copy)."""
        return dict(self._data)

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the controller's object by name (``None`` if it has none: an older controller)."""
        return self._data.get(key, default)

    # ---- what it is -----------------------------------------------------------------------

    @property
    def id(self) -> str:
        return str(self._data["id"])

    @property
    def name(self) -> str:
        return str(self._data.get("name", ""))

    @property
    def state(self) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED or CANCELLED."""
        return str(self._data["state"])

    @property
    def done(self) -> bool:
        """Whether the job has ended (COMPLETED, FAILED or CANCELLED): its outcome is final."""
        return self.state in TERMINAL

    @property
    def ok(self) -> bool:
        """Whether it ended COMPLETED (exit code 0)."""
        return self.state == "COMPLETED"

    @property
    def user(self) -> str | None:
        return self._data.get("user")

    @property
    def command(self) -> list[str]:
        return list(self._data.get("command") or [])

    @property
    def cwd(self) -> str | None:
        return self._data.get("cwd")

    @property
    def held(self) -> bool:
        return bool(self._data.get("held"))

    @property
    def reason(self) -> str | None:
        """Why it ended as it did (``timeout``, ``oom``, a cancel's reason), or why it was requeued."""
        return self._data.get("reason")

    @property
    def pending_reason(self) -> str | None:
        """Why a PENDING job waits (resources, a dependency, held)."""
        return self._data.get("pending_reason")

    @property
    def pending_code(self) -> str | None:
        """Why a PENDING job waits as Slurm names it (``Resources``, ``Priority``, ``Dependency``,
        ``JobHeldUser``, ...: docs/operating.md); None for a job not PENDING, or from a controller
        that gives none."""
        return self._data.get("pending_code")

    # ---- where and how it ran ---------------------------------------------------------------

    @property
    def agent(self) -> str | None:
        return self._data.get("agent")

    @property
    def attempt(self) -> int:
        return int(self._data.get("attempt") or 0)

    @property
    def exit_code(self) -> int | None:
        return self._data.get("exit_code")

    @property
    def signal(self) -> int | None:
        """The signal that ended the job's process, if one did."""
        return self._data.get("signal")

    @property
    def submitted_at(self) -> float | None:
        return self._data.get("submitted_at")

    @property
    def started_at(self) -> float | None:
        return self._data.get("started_at")

    @property
    def finished_at(self) -> float | None:
        return self._data.get("finished_at")

    @property
    def cpus(self) -> int:
        return int(self._data.get("cpus") or self._data.get("slots") or 1)

    @property
    def mem(self) -> int | None:
        """Bytes of memory asked (None: none)."""
        return self._data.get("mem")

    @property
    def gpus(self) -> int:
        return int(self._data.get("gpus") or 0)

    @property
    def array_id(self) -> str | None:
        return self._data.get("array_id")

    @property
    def array_index(self) -> int | None:
        return self._data.get("array_index")

    @property
    def stdout(self) -> str | None:
        """Where the job's stdout goes on its agent, when the spec named a file (``Client.logs`` reads it anyway)."""
        return self._data.get("stdout")

    @property
    def stderr(self) -> str | None:
        return self._data.get("stderr")
