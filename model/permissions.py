"""Who may do what: the caller of a client request, and the one permission rule.

The controller's daemon authenticates a connection (MUNGE, ``daemon/auth/``) and
hands the model a ``Caller``; the model's handlers ask ``check`` before they
apply anything, so a refusal changes nothing.  ``None`` as the caller is the
token mode of a single-user cluster: whoever holds the token may do everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._check import check_int, check_str
from .errors import PermissionDenied
from .resources import MAX_UNIX_ID, Owner

# What a caller may ask for, by the rule that applies to it.
EVERYONE_ACTIONS = frozenset({"submit", "see"})  # everyone may submit and see the queue (as in Slurm)
JOB_ACTIONS = frozenset({"cancel", "hold", "release", "requeue", "signal", "read"})  # the owner's, or an operator's
NODE_ACTIONS = frozenset({"drain", "resume", "forget"})  # operators only
CLUSTER_ACTIONS = frozenset({"partition"})  # operators only: change the partitions (model/partition_ops.py)
# Operators only, on a job: set its priority adjustment, submit with a negative nice (model/priority.py).
PRIORITY_ACTIONS = frozenset({"prioritize", "nice"})
ACTIONS = EVERYONE_ACTIONS | JOB_ACTIONS | NODE_ACTIONS | CLUSTER_ACTIONS | PRIORITY_ACTIONS


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """An authenticated client: its uid and primary gid from the credential, its name on the
    controller's machine, and whether it is an operator (root, or in the operators' group)."""

    uid: int
    gid: int
    user: str
    operator: bool = False
    # The Unix groups (names) it is in on the controller's machine: partitions' allow_groups
    # (model/partitions.py).  Empty: not looked up (the daemon fills it in MUNGE mode).
    groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_int("uid", self.uid, minimum=0, maximum=MAX_UNIX_ID)
        check_int("gid", self.gid, minimum=0, maximum=MAX_UNIX_ID)
        check_str("user", self.user, max_len=256)
        if not isinstance(self.operator, bool):
            raise ValueError("operator must be a bool")
        if not isinstance(self.groups, tuple) or not all(type(g) is str for g in self.groups):
            raise ValueError("groups must be a tuple of group names")

    def owner(self) -> Owner:
        """The owner a job this caller submits gets."""
        return Owner(uid=self.uid, gid=self.gid, user=self.user)


def check(caller: Caller | None, action: str, owner: Owner | None, *, job: str | None = None,
          node: str | None = None) -> str | None:
    """The one permission rule: None if ``caller`` may do ``action``, else the refusal's one line.

    ``caller`` None is token mode: whoever holds the token may do everything.  Operators may do
    everything.  Anyone may submit and see the queue.  A job's operations (``JOB_ACTIONS``; "read"
    is its output) are its owner's; a job without an owner (submitted in token mode) is then
    operators-only, and the node operations (``NODE_ACTIONS``) are operators-only always.  The
    owner is compared by uid (the name is what the controller's machine calls it, for the line).
    """
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(sorted(ACTIONS))}")
    if caller is None or caller.operator or action in EVERYONE_ACTIONS:
        return None
    if action in CLUSTER_ACTIONS:
        return f"only an operator may change partitions: {caller.user} is not one"
    if action == "prioritize":
        return f"only an operator may set the priority of {'job ' + job if job else 'a job'}: {caller.user} is not one"
    if action == "nice":
        return f"only an operator may submit with a negative nice: {caller.user} is not one"
    if action in NODE_ACTIONS:
        what = f"agent {node}" if node is not None else "a node"
        return f"only an operator may {action} {what}: {caller.user} is not one"
    if owner is not None and owner.uid == caller.uid:
        return None
    what = f"job {job}" if job is not None else "this job"
    if owner is None:
        return f"{what} belongs to no user (submitted in token mode): {caller.user} may not {action} it"
    return f"{what} belongs to {owner.user}: {caller.user} may not {action} it"


def require(caller: Caller | None, action: str, owner: Owner | None, *, job: str | None = None,
            node: str | None = None) -> None:
    """``check``, raising ``PermissionDenied`` with its line: what a handler calls before it applies anything."""
    refusal = check(caller, action, owner, job=job, node=node)
    if refusal is not None:
        raise PermissionDenied(refusal)


def owner_of(caller: Caller | None) -> Owner | None:
    """The owner of a job this caller submits: None in token mode."""
    return caller.owner() if caller is not None else None
