"""Logging set-up of the daemons: text or one JSON object per line, and quiet WebSocket layers.

``-v`` turns reckon's own loggers to DEBUG (protocol detail: messages by
type, refusals each time); trio-websocket and wsproto stay at WARNING even
then, so no raw frame is ever dumped into the log.
"""

from __future__ import annotations

import json
import logging
import sys
import time

# Libraries whose DEBUG output is frame-by-frame: never below WARNING.
QUIET_LOGGERS = ("trio-websocket", "trio_websocket", "wsproto")
TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message, and the exception if any."""

    def format(self, record: logging.LogRecord) -> str:
        obj = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            obj["exception"] = self.formatException(record.exc_info)
        return json.dumps(obj, ensure_ascii=False)


def make_formatter(log_format: str = "text") -> logging.Formatter:
    if log_format not in ("text", "json"):
        raise ValueError(f"unknown log format {log_format!r}: text or json")
    return JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


def announce(text: str, log_format: str = "text", *, logger: str = "reckon") -> None:
    """Print a daemon's line for its operator to stdout (``listening on ...``): as it is, or with
    ``--log-format json`` as a JSON object like every log line, so that every line the daemon writes parses."""
    if log_format == "json":
        record = logging.LogRecord(logger, logging.INFO, __file__, 0, text, None, None)
        text = JsonFormatter().format(record)
    print(text, flush=True)


def quiet_libraries() -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def setup_logging(*, verbose: bool, log_format: str = "text", stream=None) -> None:
    """Log to ``stream`` (stderr); the daemons use ``daemon.cli.logfile.setup_logging`` (also a file)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(make_formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    quiet_libraries()
