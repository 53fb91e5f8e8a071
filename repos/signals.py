"""A revision made in the product for a graph kept in Git is recorded for export in the
revision's own transaction. A receiver, not a call from graphs.services: graphs sit below
repos and never import it (DESIGN.md, layers)."""

from django.db.models.signals import post_save
from django.dispatch import receiver

from graphs.models import Revision

from .services import export_record


@receiver(post_save, sender=Revision, dispatch_uid="repos.revision_export")
def revision_saved(sender, instance: Revision, created: bool, raw: bool = False, **kwargs) -> None:
    if created and not raw:
        export_record(revision=instance)
