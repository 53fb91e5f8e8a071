"""What a scrape reads at scrape time from the database and the broker, so that every web
process (and pod) answers the same. Each app that owns state registers its readers (graphs:
operations and the status cache, clusters: watch lag); the broker's queue depth is read here.
Each reader that fails is left out of the scrape and counted in ``controlplane_scrape_errors``
(a database or broker that is down must not turn /metrics into a 500)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from celery import current_app
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

log = logging.getLogger(__name__)

QUEUE_TIMEOUT = 2.5  # seconds: a broker that does not answer is reported as an error, not waited for


@dataclass(frozen=True)
class Reader:
    """One part of a scrape: metric families read from the state at ``now``."""

    name: str
    read: Callable[[datetime], Iterable[Metric]]
    uses_database: bool = True


READERS: dict[str, Reader] = {}


def register(name: str, read: Callable[[datetime], Iterable[Metric]], *, uses_database: bool = True) -> None:
    """Add a part to every scrape (an app's ``ready``); registering a name again replaces it."""
    READERS[name] = Reader(name, read, uses_database)


def _queue(now: datetime) -> Iterable[Metric]:
    app = current_app
    family = GaugeMetricFamily("controlplane_queue_depth", "Tasks waiting in the Celery broker's queue",
                               labels=["queue"])
    queue = app.conf.task_default_queue or "celery"
    with app.connection_for_read(settings.CELERY_BROKER_URL) as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=QUEUE_TIMEOUT)
        try:
            depth = conn.default_channel.queue_declare(queue=queue, passive=True).message_count
        except conn.channel_errors:  # no such queue yet (Redis: an empty one): nothing waits
            depth = 0
    family.add_metric([queue], depth)
    yield family


register("queue", _queue, uses_database=False)


class StateCollector:
    """A prometheus-client collector over the registered readers (read at scrape time)."""

    def collect(self):
        from django.db import close_old_connections

        close_old_connections()
        now = timezone.now()
        errors = GaugeMetricFamily("controlplane_scrape_errors",
                                   "1 for a part of this scrape that could not be read", labels=["part"])
        started = time.perf_counter()
        database_down = False
        for reader in list(READERS.values()):
            name = reader.name
            if reader.uses_database and database_down:  # do not wait for a down database for each reader
                errors.add_metric([name], 1)
                continue
            try:
                families = list(reader.read(now))
            except Exception as exc:  # a down database or broker: say so, keep the rest
                log.warning("metrics: %s could not be read: %s", name, exc)
                errors.add_metric([name], 1)
                database_down = database_down or (reader.uses_database and isinstance(exc, DatabaseError))
                continue
            errors.add_metric([name], 0)
            yield from families
        yield errors
        took = GaugeMetricFamily("controlplane_scrape_duration_seconds", "Time this scrape spent reading state")
        took.add_metric([], time.perf_counter() - started)
        yield took
