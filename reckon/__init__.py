"""reckon: a batch-job controller and per-machine agent that never loses or invents a job outcome.

The installed import names are all under ``reckon``: ``reckon.model`` (the pure protocol,
the ``model/`` folder) and ``reckon.daemon`` (the I/O shell, the ``daemon/`` folder).
The Python client API will live here.
"""

__version__ = "0.1.0"
