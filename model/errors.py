"""One error hierarchy for the whole protocol, as in h11.

A ``LocalProtocolError`` means *our* side was asked to do something the
protocol forbids (cancel an unknown job, a missing transition).  A
``RemoteProtocolError`` means the *peer* sent something invalid; the daemon
answers it with an error message and closes that connection.  Raising either
never leaves a partial state change behind: every handler validates before it
mutates.
"""


class ProtocolError(Exception):
    """Base class: something the protocol does not allow."""


class LocalProtocolError(ProtocolError):
    """A request from our own side (client, daemon) that the model refuses."""


class RemoteProtocolError(ProtocolError):
    """A peer sent a message that is malformed or not allowed right now."""


class PermanentRefusal(RemoteProtocolError):
    """The peer is refused for a reason a quick retry will not fix (another
    controller history, say): the daemon hangs up and retries at its slow
    refusal pace, logging the reason once, not at its fast outage pace."""


class ModelCorrupted(Exception):
    """A model raised after it had applied a fact: its state now differs from its log.

    Not a protocol error (no peer or request is to blame, and nothing can be refused):
    the daemon stops with one line and a supervisor restarts it from its log, which is
    the truth.  Raised with the exception that broke the handler as its ``__cause__``."""


class PermissionDenied(LocalProtocolError):
    """The caller may not do this to this job or node (``model.permissions.check``): one line
    naming the owner.  Raised before anything is applied, so a refusal changes nothing."""
