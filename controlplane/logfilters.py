"""Log filters the settings' LOGGING names."""

from __future__ import annotations

import logging


class RefusalWithoutTraceback(logging.Filter):
    """A 403 for a role that may not do something is the product working, not a fault: Django
    logs it with the PermissionDenied's traceback; keep the one line ("Forbidden (Permission
    denied): /path"), drop the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403 and record.exc_info:
            record.exc_info = None
            record.exc_text = None
        return True
