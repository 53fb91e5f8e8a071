"""Celery tasks: the one periodic sweep of every kind of job (jobs/registry.py)."""

from celery import shared_task

from . import registry


@shared_task
def jobs_sweep() -> dict:
    return registry.sweep()
