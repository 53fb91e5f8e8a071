"""The one job runner: claim → work → succeeded | failed | internal error → retry, for every
background job (operations, benchmark runs, sizing estimates), after NetBox's
``JobRunner.handle``. Each app subclasses :class:`JobRunner`, names its ``kind`` (the class
registers itself: jobs/registry.py) and writes only its work function.

* **claim**: a conditional UPDATE of the row (``claimable``, attempts below ``max_attempts``):
  exactly one caller wins, and it owns that attempt number.
* **heartbeat**: while the work runs, a thread renews the lease every few seconds, so that a
  worker that died is noticed once its lease (15-20 s) runs out, not after the longest job
  could take.
* **work** runs outside any transaction (a cluster call never holds a row lock open) and
  returns what to record. **finish** then takes the row lock, checks the attempt is still
  this caller's (the sweep, a cancel or a taken-over claim may have ended it), records the
  outcome through :meth:`JobRunner.commit` and ends the row, in one short transaction.
* A failure the app names (``failures``, or :class:`JobFailed`) ends the job failed with its
  message; a transient one leaves it running with an expired lease for the task's retry or
  the sweep while attempts remain; anything else ends it failed as an internal error,
  logged with its traceback.
* **sweep** (the one periodic task, jobs/registry.py): a pending row no worker took within
  ``stale_pending`` is sent again (failed after ``give_up_pending``, if set); a running row whose
  lease ran out is tried again while attempts remain, else failed (:meth:`JobRunner.lost`)."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from typing import ClassVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection, connections, transaction
from django.db.models import F, Q
from django.utils import timezone

from . import registry
from .dispatch import enqueue
from .models import PENDING, RUNNING, Job

log = logging.getLogger(__name__)

SUCCEEDED = "succeeded"
FAILED = "failed"
FINISH_TRIES = 6  # 1 + 2 + ... + 5 s: through a database restart
FINISH_BACKOFF = 1.0


class JobFailed(Exception):
    """Raised by work to end the job in ``state`` (failed unless told) with its message."""

    def __init__(self, message: str, *, state: str = FAILED):
        super().__init__(message)
        self.state = state


class Heartbeat:
    """Renews a running job's lease from a thread of its own until stopped. ``lost`` is set
    once the row is no longer this attempt's (finished elsewhere), so long work can stop.

    The thread has its own database connection, so it only runs where the claim is committed
    (autocommit, as in a worker): inside an open transaction (a test's) it would wait on the
    claim's own row lock, and there is nothing another process could see to renew."""

    def __init__(self, runner: JobRunner):
        self.runner = runner
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        if not connection.in_atomic_block:
            self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{self.runner.pk}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            # Bounded: a renewal stuck on a database that went away must not hold the worker.
            self._thread.join(timeout=self.runner.heartbeat_seconds() + 5)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.runner.heartbeat_seconds()):
                try:
                    if not self.runner.renew():
                        self.lost.set()
                        return
                except Exception as exc:  # the database is down: the next beat tries again
                    log.warning("heartbeat of %s %s failed: %s", self.runner.model.__name__, self.runner.pk, exc)
                    close_old_connections()
        finally:
            connections.close_all()  # this thread's connections only (they are per thread)


class JobRunner:
    """Runs one job row. Subclasses set ``kind``, ``model`` and ``task`` and write :meth:`work`."""

    kind: ClassVar[str]  # its name in jobs.registry.KINDS
    model: ClassVar[type[Job]]
    task: ClassVar[str]  # the Celery task that runs this kind (the sweep sends it again by it)
    max_attempts: ClassVar[int] = 1
    message_field: ClassVar[str] = "result"  # where a failure's text is written
    failures: ClassVar[tuple[type[BaseException], ...]] = ()  # expected: failed with their message
    stale_pending: ClassVar[dt.timedelta] = dt.timedelta(seconds=10)  # unclaimed this long: sent again
    give_up_pending: ClassVar[dt.timedelta | None] = None  # unclaimed this long: failed (None: never)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        registry.registering(cls, cls.__dict__)

    def __init__(self, pk: int, attempt: int):
        self.pk = pk
        self.attempt = attempt
        self.heartbeat: Heartbeat | None = None

    # --- what a subclass writes ----------------------------------------------------------------

    @classmethod
    def lease_seconds(cls) -> float:
        raise NotImplementedError

    @classmethod
    def heartbeat_seconds(cls) -> float:
        """A few beats per lease, so one missed beat (a slow database) does not lose the job."""
        return min(settings.JOB_HEARTBEAT_SECONDS, cls.lease_seconds() / 3)

    @classmethod
    def claimable(cls) -> Q:
        """Which rows a claim may take: pending ones (a subclass may add expired running ones)."""
        return Q(state=PENDING)

    def work(self) -> dict:
        """Do the job; return the fields a success records. Raise JobFailed (or one of
        ``failures``) to end it failed with a message."""
        raise NotImplementedError

    def commit(self, state: str, fields: dict) -> None:
        """Record the outcome's side effects: inside finish's transaction, under the row lock,
        the attempt verified. By default nothing beyond the row's own fields."""

    def transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` is worth another attempt (the task's retry or the sweep)."""
        return False

    def ending(self, state: str, fields: dict) -> dict:
        """The fields the row ends with in ``state``: by default ``fields`` as they are."""
        return fields

    def finished(self, state: str) -> None:
        """After the row ended in ``state`` (committed): what follows it, e.g. a next step."""

    @classmethod
    def failure_fields(cls, message: str) -> dict:
        return {cls.message_field: message}

    # --- the sweep: what got stuck -------------------------------------------------------------

    @classmethod
    def sweep(cls, now: dt.datetime) -> dict[str, int]:
        """Send again what no worker took, and hand on what a dead worker held."""
        counts = {"requeued": 0, "failed": 0, "": 0}  # "": it moved on since it was read
        for job in cls.model.lease_expired(now):
            counts[cls.lost(job)] += 1
        for job in cls.model.waiting_since(now - cls.stale_pending):
            if cls.give_up_pending is not None and job.created_at < now - cls.give_up_pending:
                counts[cls.fail(job, f"no worker picked this {cls.kind} up within "
                                     f"{cls.give_up_pending.total_seconds() / 60:g} minutes")] += 1
            else:
                counts[cls.send(job)] += 1
        counts.pop("", None)
        return counts

    @classmethod
    def lost(cls, job: Job) -> str:
        """A running job whose worker stopped renewing its lease: tried again while attempts
        remain, else failed. "requeued", "failed", or "" when it moved on meanwhile."""
        if job.attempts < cls.max_attempts:
            return cls.send(job)
        return cls.fail(job, f"gave up after {job.attempts} attempt(s): the worker running it was lost")

    @classmethod
    def send(cls, job: Job) -> str:
        enqueue(cls.task, job.pk, on_commit=False)
        return "requeued"

    @classmethod
    def fail(cls, job: Job, message: str, **fields) -> str:
        """End a stuck job failed with ``message``, unless it moved on since it was read."""
        return "failed" if cls.model.give_up(job, FAILED, **cls.failure_fields(message), **fields) else ""

    # --- the ladder ----------------------------------------------------------------------------

    @classmethod
    def claim(cls, pk: int) -> int | None:
        """Take job ``pk`` for this caller; the attempt number it owns, or None."""
        if not cls.model.claim(pk, lease_seconds=cls.lease_seconds(),
                               claimable=cls.claimable() & Q(attempts__lt=cls.max_attempts),
                               attempts=F("attempts") + 1):
            return None
        return cls.model.objects.values_list("attempts", flat=True).get(pk=pk)

    def mine(self) -> Q:
        return Q(pk=self.pk, state=RUNNING, attempts=self.attempt)

    def renew(self, **fields) -> bool:
        """Extend this attempt's lease (with ``fields`` set); False once the row is not ours."""
        lease = timezone.now() + dt.timedelta(seconds=self.lease_seconds())
        count = self.model.objects.filter(self.mine()).update(lease_until=lease, **fields)
        return bool(self.model.written([self.pk], count) if fields else count)

    def finish(self, state: str, fields: dict) -> bool:
        """End the row in ``state`` with ``fields``, and commit the outcome, if this attempt
        still holds it. False when it was finished elsewhere (nothing recorded then).

        The work is done by now: a database that is away for a moment (a failover) is waited
        for, a few times, rather than leaving the outcome to the lease and a second attempt."""
        for attempt in range(FINISH_TRIES):
            try:
                with transaction.atomic():
                    if not self.model.objects.select_for_update(of=("self",)).filter(self.mine()).exists():
                        return False
                    self.commit(state, fields)
                    self.model.finish(self.pk, state, **self.ending(state, fields))
                break
            except (OperationalError, InterfaceError):
                if attempt == FINISH_TRIES - 1:
                    raise
                connection.close()  # a connection the server cut stays broken: take a new one
                time.sleep(FINISH_BACKOFF * (attempt + 1))
        self.finished(state)
        return True

    def release(self, message: str) -> None:
        """Leave the row running with an expired lease: the retry, or the sweep, takes it."""
        self.model.written([self.pk], self.model.objects.filter(self.mine()).update(
            lease_until=timezone.now(), **self.failure_fields(message)))

    @classmethod
    def handle(cls, pk: int) -> str:
        """Run job ``pk``. Safe to call any number of times from any number of workers: the
        claim picks one caller, and only the attempt that still holds the row records anything.
        Returns the row's state, "not claimed" or "claim lost"; re-raises a transient failure
        (for the task's retry) while attempts remain."""
        attempt = cls.claim(pk)
        if attempt is None:
            return "not claimed"
        runner = cls(pk, attempt)
        with Heartbeat(runner) as runner.heartbeat:
            try:
                fields = runner.work()
            except Exception as exc:
                if isinstance(exc, (OperationalError, InterfaceError)):
                    # The database went away mid-work (a failover): not the job's fault. Another
                    # attempt, on a new connection, once it is back (the sweep hands it on).
                    if not connection.in_atomic_block:
                        connection.close()
                    if attempt < cls.max_attempts:
                        with contextlib.suppress(OperationalError, InterfaceError):
                            runner.release(f"the database went away: {exc}")
                        raise
                if runner.transient(exc) and attempt < cls.max_attempts:
                    runner.release(str(exc))
                    raise
                if isinstance(exc, JobFailed):
                    runner.finish(exc.state, runner.failure_fields(str(exc)))
                elif isinstance(exc, cls.failures) or runner.transient(exc):
                    runner.finish(FAILED, runner.failure_fields(str(exc)))
                else:
                    log.exception("%s %s failed", cls.model.__name__, pk)
                    runner.finish(FAILED, runner.failure_fields(f"internal error: {exc}"))
            else:
                if not runner.finish(SUCCEEDED, fields):
                    return "claim lost"
        return cls.model.objects.values_list("state", flat=True).get(pk=pk)
