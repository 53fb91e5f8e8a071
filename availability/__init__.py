"""What counts as a dependency down (the database, the task broker, the cache, var/'s disk), and
what a 503 for one says. Asked by the web wiring's 500 handler and API (controlplane/unavailable.py)
and by the OpenAI relay and gateway authorizer, which run outside Django's middleware
(endpoint/): one rule, so that no path answers a bare 500 where another says what is down."""

from __future__ import annotations

import errno

from django.db import InterfaceError, OperationalError
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

RETRY_AFTER_SECONDS = 5


def dependency_down(exc: BaseException | None) -> str | None:
    """The name of the dependency whose failure ``exc`` is, or None when it is another error.
    A database error that is not about the connection (a bad query) is not one of these:
    Django raises those as ProgrammingError, IntegrityError or DataError."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return "the database"
    if isinstance(exc, BrokerError):
        return "the task broker"
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError)):
        # Refused, or paused: the cache's client gives up after CACHE_TIMEOUT (environment.py).
        return "the cache (Redis)"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        # The var/ folder (metrics files, runtime and benchmark folders) is full: nothing this
        # request could do is lost by refusing it, and it works again once space is freed.
        return "disk space under the control plane's var/ folder"
    return None


def detail(what: str) -> str:
    return (f"{what} is unavailable: the control plane cannot answer this request now. Nothing was changed; "
            f"try again in {RETRY_AFTER_SECONDS} seconds.")
