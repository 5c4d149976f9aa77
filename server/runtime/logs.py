"""structlog set-up: one JSON object per line on stderr.

Loom logs ids, codes and durations, never request or response bodies: emails, addresses and
message text must not reach a log. Handlers therefore never log requests; the RPC
interceptor logs one line per call with the method, status, duration and request id.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

__all__ = ["configure_logging", "get_logger"]


def configure_logging(level: str = "info", stream: TextIO | None = None) -> None:
    """JSON lines with an ISO timestamp and level, on stderr (or `stream`); idempotent."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # One write() per line (PrintLogger writes the text and the newline separately), so
        # the lines of `--workers N` processes sharing stderr never interleave mid-line.
        logger_factory=structlog.WriteLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=True,
    )


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """A logger bound to a component name."""
    # A lazy proxy: it binds only when first used, after configure_logging() has run.
    return structlog.get_logger(component=name)  # type: ignore[no-any-return]
