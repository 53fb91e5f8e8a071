"""Celery tasks: ids in, one service call."""

from celery import shared_task

from .export import repository_export as export_service
from .models import Repository
from .sync import repository_sync as sync_service


@shared_task(acks_late=True)
def repository_sync(repo_id: int) -> dict:
    repo = Repository.objects.filter(pk=repo_id).first()
    return sync_service(repository=repo).as_dict() if repo else {}


@shared_task(acks_late=True)
def repositories_sync() -> int:
    """The periodic sync of every repository (a webhook makes it prompt; this makes it sure)."""
    for repo in Repository.objects.all():
        sync_service(repository=repo)
        export_service(repository=repo)  # and what a stopped worker left waiting
    return Repository.objects.count()


@shared_task(acks_late=True)
def repository_export(repo_id: int) -> int:
    repo = Repository.objects.filter(pk=repo_id).first()
    return len(export_service(repository=repo)) if repo else 0
