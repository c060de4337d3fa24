"""Who may do what: the caller of a client request, and the one permission rule.

The controller's daemon authenticates a connection (MUNGE, ``daemon/auth/``) and
hands the model a ``Caller``; the model's handlers ask ``check`` before they
apply anything, so a refusal changes nothing.  ``None`` as the caller is the
token mode of a single-user cluster: whoever holds the token may do everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._check import check_int, check_str
from .resources import MAX_UNIX_ID, Owner


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """An authenticated client: its uid and primary gid from the credential, its name on the
    controller's machine, and whether it is an operator (root, or in the operators' group)."""

    uid: int
    gid: int
    user: str
    operator: bool = False

    def __post_init__(self) -> None:
        check_int("uid", self.uid, minimum=0, maximum=MAX_UNIX_ID)
        check_int("gid", self.gid, minimum=0, maximum=MAX_UNIX_ID)
        check_str("user", self.user, max_len=256)
        if not isinstance(self.operator, bool):
            raise ValueError("operator must be a bool")

    def owner(self) -> Owner:
        """The owner a job this caller submits gets."""
        return Owner(uid=self.uid, gid=self.gid, user=self.user)
