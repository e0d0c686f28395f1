"""Logging filters the settings' LOGGING uses (no Django imports: read before setup)."""

from __future__ import annotations

import logging


class ClientErrorsWithoutTraceback(logging.Filter):
    """A 4xx that Django logs from an exception (a member's POST to an operator's page:
    `PermissionDenied` → "Forbidden (Permission denied): /path") stays one line. Django
    attaches the exception, and its 35-line traceback, to every such record; it says
    nothing about a refusal that worked and buried real errors. A 5xx keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
