"""Every kind of background work, in one table, and the one sweep that looks after all of them.

A kind registers itself by being declared with a ``kind`` name (after NetBox's ``JobRunner``
registry), in one of two shapes:

* a :class:`jobs.runner.JobRunner`: one row claimed, worked and finished by a worker
  (an operation, a benchmark run, a sizing estimate);
* a :class:`Driver`: a row that drives child jobs one step at a time, each step run by its
  task and rescheduled until the row is done (an A/B study, a recommendation being applied).

:func:`sweep` is the one periodic task (``jobs.tasks.jobs_sweep``, one beat entry): it asks every
kind for what got stuck (a pending row no worker took, a lease its worker stopped renewing, a
driver whose next step was never sent) and each kind answers by its own rules. A new kind is
one class; nothing else names it."""

from __future__ import annotations

import datetime as dt
import logging
from typing import ClassVar, Protocol

from django.utils import timezone
from django.utils.module_loading import autodiscover_modules

log = logging.getLogger(__name__)


class Kind(Protocol):
    kind: ClassVar[str]

    @classmethod
    def sweep(cls, now: dt.datetime) -> dict[str, int]: ...


KINDS: dict[str, type[Kind]] = {}


def register(cls: type[Kind]) -> None:
    """Add ``cls`` under its ``kind``; called by the base classes as a kind is declared."""
    known = KINDS.get(cls.kind)
    if known is not None and known.__qualname__ != cls.__qualname__:
        raise ValueError(f"two job kinds are named {cls.kind!r}: {known.__module__}.{known.__qualname__} "
                         f"and {cls.__module__}.{cls.__qualname__}")
    KINDS[cls.kind] = cls


def registering(cls: type, namespace: dict) -> None:
    """The base classes' ``__init_subclass__``: a subclass that names a ``kind`` is one."""
    if "kind" in namespace:
        register(cls)


def load() -> dict[str, type[Kind]]:
    """Every kind: each app declares its kinds in modules its tasks module imports, which the
    worker loads at start; this imports every app's tasks module (Django's autodiscovery, as the
    admin finds its modules) in any other process: a web process, a test, a shell."""
    autodiscover_modules("tasks")
    return KINDS


def sweep(now: dt.datetime | None = None) -> dict[str, dict[str, int]]:
    """Ask every kind for what got stuck; what each did, by kind (only those that did something).
    A kind whose sweep fails (its table unreadable, say) is logged and counted as ``failed_sweep``;
    the others are swept all the same."""
    now = now or timezone.now()
    out = {}
    for name, kind in sorted(load().items()):
        try:
            counts = {k: v for k, v in kind.sweep(now).items() if v}
        except Exception:
            log.exception("the sweep of job kind %s failed; the next sweep tries again", name)
            counts = {"failed_sweep": 1}
        if counts:
            out[name] = counts
    return out


class Driver:
    """A row that drives child jobs one step at a time (an A/B study applies, measures and
    tears down variants; a recommendation scales pools one operation after the other). Its
    task calls :meth:`advance`, which does what the row's state allows and reschedules itself
    while there is more; the sweep advances every row still active, so a step whose message was
    lost (a broker down, a worker killed) is taken again. ``advance`` must be safe to call
    any number of times: it re-reads the row and its children."""

    kind: ClassVar[str]
    task: ClassVar[str]  # the Celery task that takes one step (it calls advance)
    step_delay: ClassVar[float]  # seconds before the next step, while a child job still runs

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        registering(cls, cls.__dict__)

    @classmethod
    def schedule(cls, pk: int, *, now: bool) -> None:
        """Send row ``pk``'s next step: at once (``now``), or after ``step_delay``."""
        from .dispatch import enqueue

        enqueue(cls.task, pk, countdown=0 if now else cls.step_delay)

    @classmethod
    def active(cls) -> list[int]:
        """The rows that still have steps to take."""
        raise NotImplementedError

    @classmethod
    def advance(cls, pk: int) -> str:
        """Take the next step of row ``pk``; its state after it."""
        raise NotImplementedError

    @classmethod
    def sweep(cls, now: dt.datetime) -> dict[str, int]:
        ids = cls.active()
        for pk in ids:
            cls.advance(pk)
        return {"advanced": len(ids)}
