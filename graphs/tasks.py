"""Celery tasks: ids in, one service call. Idempotency lives in the services (claims)."""

from celery import shared_task

from core.errors import RuntimeFailure

from . import operations


@shared_task(acks_late=True, reject_on_worker_lost=True, autoretry_for=(RuntimeFailure,),
             retry_backoff=2, retry_backoff_max=60, max_retries=3)
def operation_run(op_id: int) -> str:
    return operations.operation_run(op_id)

