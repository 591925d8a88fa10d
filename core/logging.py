"""Structured log formatting: every field passed in `extra=` is printed as a key-value pair."""

import logging

from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

# Attributes every LogRecord has; anything else on a record came from `extra=` and is a structured field.
_STANDARD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


def _extra_fields(record: logging.LogRecord) -> dict:
    return {key: value for key, value in record.__dict__.items() if key not in _STANDARD_ATTRIBUTES}


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{key}={value!r}" for key, value in _extra_fields(record).items())
        line = f"{self.formatTime(record)} {record.levelname} {record.name} {record.getMessage()}"
        if fields:
            line = f"{line} {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


class JsonFormatter(_BaseJsonFormatter):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("fmt", "%(asctime)s %(levelname)s %(name)s %(message)s")
        super().__init__(*args, **kwargs)
