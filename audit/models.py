"""The audit log: one append-only record per mutation, with secrets redacted."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditRecord(models.Model):
    """Who did what to which object, from where, with the state before and after. Rows are
    never updated or deleted by the product (save refuses updates; there is no delete path)."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    actor_name = models.CharField(max_length=150, blank=True)  # kept when the user is deleted
    via = models.CharField(max_length=10, default="ui")  # ui | api | cli | system
    action = models.CharField(max_length=60, db_index=True)  # graph.create, operation.apply, cluster.update...
    target_type = models.CharField(max_length=40, db_index=True)
    target = models.CharField(max_length=253, db_index=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name or '-'} {self.action} {self.target}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("audit records are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("audit records are append-only")
