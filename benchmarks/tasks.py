"""Celery tasks: ids in, one service call. Idempotency lives in the services (claims)."""

from celery import shared_task
from django.conf import settings

from . import recommendations, services, studies


# acks_late with reject_on_worker_lost: a worker killed mid-run gets its message redelivered,
# and the redelivery finds the row already claimed ("not claimed"); the sweep (jobs/registry.py)
# fails the run once its heartbeat lease expires. The time limit is a backstop above max_seconds.
@shared_task(acks_late=True, reject_on_worker_lost=True, time_limit=settings.BENCHMARK_MAX_SECONDS + 300)
def benchmark_execute(run_id: int) -> str:
    return services.benchmark_execute(run_id)


@shared_task
def study_advance(study_id: int) -> str:
    return studies.StudyDriver.advance(study_id)


@shared_task
def recommendation_advance(recommendation_id: int) -> str:
    return recommendations.RecommendationDriver.advance(recommendation_id)
