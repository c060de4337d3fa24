"""reckon: a batch-job controller and per-machine agent that never loses or invents a job outcome.

The installed import names are all under ``reckon``: ``reckon.model`` (the pure protocol,
the ``model/`` folder) and ``reckon.daemon`` (the I/O shell, the ``daemon/`` folder).

``import reckon`` is also the Python client API (docs/python-api.md)::

    import reckon

    client = reckon.Client()                     # settings as the `reckon` command resolves them
    job = client.submit(["sh", "-c", "echo hi"], cpus=2, mem="1G")
    job = client.wait(job)
    print(job.state, job.exit_code, client.logs(job).decode())

Its names are imported on first use, so ``import reckon`` itself costs next to nothing.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["Client", "Job", "ReckonError", "UsageError", "Refused", "Unreachable", "NotLeader", "__version__"]

# Type checkers read these names' types from __init__.pyi (the stub beside this file).

_WHERE = {"Client": "reckon.client", "Job": "reckon.job", "ReckonError": "reckon.errors",
          "UsageError": "reckon.errors", "Refused": "reckon.errors", "Unreachable": "reckon.errors",
          "NotLeader": "reckon.errors"}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'reckon' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
