"""Celery tasks: ids in, one service call. Idempotency lives in the services (claims)."""

from celery import shared_task

from . import services


# acks_late with reject_on_worker_lost: a worker killed mid-search gets its message redelivered,
# and the redelivery finds the row already claimed; the sweep (jobs/registry.py) fails it once the lease expires.
@shared_task(acks_late=True, reject_on_worker_lost=True, time_limit=600)
def estimate_execute(estimate_id: int) -> str:
    return services.estimate_execute(estimate_id)
