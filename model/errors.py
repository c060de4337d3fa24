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
