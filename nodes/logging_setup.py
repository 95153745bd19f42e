"""Logging for a serving process: a level and plain text or JSON lines, on standard error.

Layer: node, operations. Called once by whatever starts a serving process (``notes-cluster
serve``, a node process); libraries and tests never call it, they only log. JSON lines come from
python-json-logger: one object per line with ``time``, ``level``, ``logger``, ``message`` and any
structured extras a log call passed (``extra={...}``).

What the nodes log is written for an operator: every refused ``requestState``, setup link,
sign-in and legacy call says why, at INFO; a store that did not answer is a WARNING. No log line
carries a secret: not a bearer token, a sealed state, a link token, a cookie, a CSRF token, a key
or a report-service credential (``tests/test_logging.py`` greps a whole run for them).
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
DEFAULT_LEVEL = "INFO"
"""INFO: the reasons for refusals are INFO lines, and an operator wants them by default."""
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JSON_FIELDS = "%(levelname)s %(name)s %(message)s"
JSON_RENAMES = {"levelname": "level", "name": "logger"}
QUIET_LOGGERS = ("httpx", "httpcore", "hpack", "coredis")
"""Third-party loggers that talk at INFO about routine events (every request; coredis about
each script it loads on first use): kept at WARNING."""


def formatter(json_lines: bool) -> logging.Formatter:
    """The formatter ``configure_logging`` installs."""
    if json_lines:
        # "time": ISO 8601 in UTC, to the microsecond.
        return JsonFormatter(JSON_FIELDS, rename_fields=JSON_RENAMES, timestamp="time")
    return logging.Formatter(TEXT_FORMAT)


def configure_logging(
    level: str = DEFAULT_LEVEL, *, json_lines: bool = False, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record at ``level`` or above to ``stream`` (standard error by default),
    as text or JSON lines, replacing the root logger's handlers; return the handler."""
    name = level.upper()
    if name not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(json_lines))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(name)
    for quiet in QUIET_LOGGERS:
        logging.getLogger(quiet).setLevel(max(logging.WARNING, root.level))
    return handler
