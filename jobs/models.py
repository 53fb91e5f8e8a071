"""One shape for every background job of a graph (an apply, scale or delete Operation, a
BenchmarkRun), after NetBox's single Job model: who asked, how, when, the attempt count and the
lease of the worker that holds it, and the helpers that move a row through its states.

A job is claimed with a conditional UPDATE (exactly one caller wins), holds a lease while it
runs (a worker that dies stops renewing it), is finished only from ``running`` (a late worker
cannot overwrite the sweep's verdict), and the periodic sweep (registry.py) finds what is
stuck through ``waiting_since`` and ``lease_expired``. Subclasses add their ``graph`` (the
constraint below names it), their own states (``pending`` and ``running`` are shared) and
what they carry."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

PENDING = "pending"  # recorded, waiting for a worker
RUNNING = "running"  # claimed by exactly one worker (conditional UPDATE), lease held
ACTIVE = (PENDING, RUNNING)


class Job(models.Model):
    state = models.CharField(max_length=20, default=PENDING)  # subclasses name their choices
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    via = models.CharField(max_length=10, default="ui")  # ui | api | cli | study | planner
    attempts = models.PositiveIntegerField(default=0)
    lease_until = models.DateTimeField(null=True, blank=True)  # a running claim expires here
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["graph", "state"])]
        constraints = [
            # At most one unfinished job of a kind per graph: the database enforces it, so two
            # requests racing past the service's check cannot both be recorded.
            models.UniqueConstraint(fields=["graph"], condition=Q(state__in=list(ACTIVE)),
                                    name="one_active_%(class)s_per_graph"),
        ]

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE

    @classmethod
    def moved(cls, pks: list[int]) -> None:
        """Jobs ``pks`` were written: their state, or what they carry (every helper below calls
        this after its write; a heartbeat that only extends the lease does not). A kind whose
        rows a page shows as they move says so here (Operation: its graphs' status versions)."""

    @classmethod
    def written(cls, pks: list[int], count: int) -> int:
        if count:
            cls.moved(pks)
        return count

    @classmethod
    def claim(cls, pk: int, *, lease_seconds: float, claimable: Q | None = None, **fields) -> bool:
        """Take job ``pk`` (by default: while pending) for this caller: running, leased for
        ``lease_seconds``, with ``fields`` set. True for the one caller that got it."""
        now = timezone.now()
        return bool(cls.written([pk], cls.objects.filter(
            claimable if claimable is not None else Q(state=PENDING), pk=pk).update(
            state=RUNNING, started_at=now, lease_until=now + dt.timedelta(seconds=lease_seconds), **fields)))

    @classmethod
    def renew(cls, pk: int, *, lease_seconds: float, **fields) -> bool:
        """Extend a running job's lease (a worker's heartbeat), with ``fields`` set; False when
        it no longer runs (finished elsewhere: swept or cancelled)."""
        lease = timezone.now() + dt.timedelta(seconds=lease_seconds)
        count = cls.objects.filter(pk=pk, state=RUNNING).update(lease_until=lease, **fields)
        return bool(cls.written([pk], count) if fields else count)

    @classmethod
    def finish(cls, pk: int, state: str, **fields) -> bool:
        """End a running job in ``state`` with ``fields`` set; False when it no longer runs."""
        return bool(cls.written([pk], cls.objects.filter(pk=pk, state=RUNNING).update(
            state=state, finished_at=timezone.now(), lease_until=None, **fields)))

    @classmethod
    def give_up(cls, job: Job, state: str, **fields) -> int:
        """End a stuck job in ``state``, unless it moved on since it was read."""
        return cls.written([job.pk], cls.objects.filter(pk=job.pk, state=job.state).update(
            state=state, finished_at=timezone.now(), lease_until=None, **fields))

    @classmethod
    def end_unfinished(cls, state: str, **fields) -> list[int]:
        """End every pending or running job in ``state`` (after a restore: the workers that held
        them are not the ones running now). The ids it ended."""
        ids = list(cls.objects.filter(state__in=ACTIVE).values_list("pk", flat=True))
        cls.written(ids, cls.objects.filter(pk__in=ids, state__in=ACTIVE).update(
            state=state, finished_at=timezone.now(), lease_until=None, **fields))
        return ids

    @classmethod
    def lease_expired(cls, now: dt.datetime) -> models.QuerySet:
        """Running jobs whose worker stopped renewing the lease (it died, or hangs)."""
        return cls.objects.filter(state=RUNNING, lease_until__lt=now)

    @classmethod
    def waiting_since(cls, before: dt.datetime) -> models.QuerySet:
        """Pending jobs recorded before ``before`` that no worker has picked up."""
        return cls.objects.filter(state=PENDING, created_at__lt=before)
