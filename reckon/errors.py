"""The errors of ``import reckon``: the command line's own classes (daemon/client_common.py), re-exported.

``ReckonError`` is every failure's base (the CLI's ``ClientError``: its one line is ``str(exc)``);
``UsageError`` a request that cannot work as written (a bad URL, a bad field: the CLI's exit
status 2); ``Refused`` the controller's refusal (nothing was done); ``Unreachable`` no controller
answered, or the one asked stopped (a request that was sent may or may not have been acted on).
"""

from __future__ import annotations

from reckon.daemon.client_common import ClientError as ReckonError
from reckon.daemon.client_common import NotLeader, Refused, Unreachable, UsageError

__all__ = ["ReckonError", "UsageError", "Refused", "Unreachable", "NotLeader"]
