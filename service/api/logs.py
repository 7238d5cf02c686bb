"""JSON log lines. Fields come from `extra=`; the request's text and API keys are never passed in.

A logged exception adds its type, message and traceback (`error_type`, `error`, `traceback`): logs
may hold paths; response bodies never do."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

FIELDS = ("event", "request_id", "method", "route", "status", "duration_ms")
SECONDS_FORMAT = "%Y-%m-%dT%H:%M:%S"  # a line's "ts" to the second, UTC; milliseconds and "Z" follow
_ENCODER = json.JSONEncoder(ensure_ascii=False)  # json.dumps builds one per call for non-default options


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime(SECONDS_FORMAT, time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,  # which worker, under MT_WORKERS > 1
        }
        line |= {k: getattr(record, k) for k in FIELDS if hasattr(record, k)}
        if record.exc_info and record.exc_info[0] is not None:  # a log line must say what failed, and where
            line["error_type"] = record.exc_info[0].__name__
            line["error"] = str(record.exc_info[1])
            line["traceback"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return _ENCODER.encode(line)


def configure_logging(level: str = "INFO") -> dict[str, Any]:
    """Root logging as JSON on stderr; returns a uvicorn log_config that uses it too."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "json"}},
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn.error": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},  # ours is richer
        },
    }
