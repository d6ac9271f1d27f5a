"""Logging to files only, rotated daily and gzip-compressed (seed 003 section 2.2).

A concise console line per event is added when the process runs interactively. Every
record passes through the redaction filter, so no configured secret reaches a log file.
"""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import sys
from logging.handlers import TimedRotatingFileHandler
from pathlib import Path

from coding_agent.config import LoggingConfig
from coding_agent.redaction import Redactor

__all__ = ["configure_logging", "RedactingFilter"]

LOG_FILE_NAME = "coding-agent.log"


class RedactingFilter(logging.Filter):
    """Renders each record's message once, redacted, so formatters never see a secret."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info:
            # Keep tracebacks in the file log, but redacted and pre-rendered.
            message += "\n" + logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
            record.exc_text = None
        record.msg = self._redactor.text(message)
        record.args = None
        return True


def _gzip_rotator(source: str, dest: str) -> None:
    with open(source, "rb") as raw, gzip.open(dest, "wb") as packed:
        shutil.copyfileobj(raw, packed)
    os.remove(source)


def configure_logging(settings: LoggingConfig, redactor: Redactor, console: bool | None = None) -> Path:
    """Install the file handler (and the console line when interactive); return the log path."""
    directory = Path(settings.dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOG_FILE_NAME
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.setLevel(settings.level)
    redacting = RedactingFilter(redactor)

    file_handler = TimedRotatingFileHandler(path, when="midnight", backupCount=settings.backup_count, encoding="utf-8")
    file_handler.namer = lambda name: name + ".gz"
    file_handler.rotator = _gzip_rotator
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"))
    file_handler.addFilter(redacting)
    root.addHandler(file_handler)

    if console is None:
        console = sys.stderr.isatty()
    if console:
        console_handler = logging.StreamHandler(sys.stderr)
        console_handler.setLevel(logging.INFO)
        console_handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        console_handler.addFilter(redacting)
        console_handler.addFilter(lambda record: record.name.startswith("coding_agent"))
        root.addHandler(console_handler)
    # A line per HTTP request is noise, and a file write per model request and forge
    # request; `httpx2` is the copy of httpx later openai SDKs are built on.
    for noisy in ("httpx", "httpx2", "httpcore", "mcp", "uvicorn", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return path
