"""Enqueue background work by task name, once the transaction that recorded it commits.

Services call :func:`enqueue` instead of importing task objects, so no service imports a tasks
module (tasks import services, never the other way round) and a web process can enqueue work
without loading the worker's code. The eager-mode decision lives here too: with
``CELERY_TASK_ALWAYS_EAGER`` (tests, benches) the work runs inline, and a *delayed* enqueue is
dropped, because nothing would wait: the caller or the periodic sweep (jobs/registry.py) drives what waits."""

from __future__ import annotations

import logging

from celery import current_app
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerError

log = logging.getLogger(__name__)


def enqueue(name: str, *args, countdown: float = 0, on_commit: bool = True) -> None:
    """Run task ``name`` with ``args``: after the current transaction commits (at once outside
    one, or with ``on_commit=False``), ``countdown`` seconds later."""
    app = current_app
    if countdown and app.conf.task_always_eager:
        return

    def send() -> None:
        if app.conf.task_always_eager:
            app.loader.import_default_modules()  # registers every app's tasks in this process
            app.tasks[name].apply(args)
        else:
            try:
                app.send_task(name, args, countdown=countdown or None)
            except BrokerError as exc:
                # The work is recorded (a pending row) and the request must not fail for it:
                # the periodic sweep sends it again once the broker is back.
                log.warning("task %s%r not sent, the broker is unreachable (the sweep sends it again): %s",
                            name, args, exc)

    if on_commit:
        transaction.on_commit(send)
    else:
        send()
