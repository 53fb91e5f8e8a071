"""Celery tasks: ids in, one service call."""

import logging

from celery import shared_task

from .export import repository_export as export_service
from .models import Repository
from .services import sync_starting
from .sync import repository_failed
from .sync import repository_sync as sync_service

log = logging.getLogger(__name__)


@shared_task(acks_late=True)
def repository_sync(repo_id: int) -> dict:
    sync_starting(repo_id)
    repo = Repository.objects.filter(pk=repo_id).first()
    return sync_service(repository=repo).as_dict() if repo else {}


@shared_task(acks_late=True)
def repositories_sync() -> int:
    """The periodic sync of every repository (a webhook makes it prompt; this makes it sure).
    One repository that fails, however, is recorded on it and never stops the others."""
    for repo in Repository.objects.all():
        try:
            sync_service(repository=repo)
            export_service(repository=repo)  # and what a stopped worker left waiting
        except Exception as exc:
            log.exception("the periodic sync of repository %s failed", repo.name)
            repository_failed(repository=repo, error=exc)
    return Repository.objects.count()


@shared_task(acks_late=True)
def repository_export(repo_id: int) -> int:
    repo = Repository.objects.filter(pk=repo_id).first()
    return len(export_service(repository=repo)) if repo else 0
