from django.apps import AppConfig


class ReposConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "repos"
    verbose_name = "Git repositories"

    def ready(self) -> None:
        from graphs.selectors import PAGE_NOT_READ, PAGE_RELATED

        from . import signals  # noqa: F401  (connects the revision receiver)

        # The graph page's Git card reads the graph's link and its head's export with the graph.
        PAGE_RELATED.extend(("git_link__repository", "head__git_export"))
        PAGE_NOT_READ.extend(f"head__git_export__{field}" for field in ("base_text", "ours_text", "theirs_text",
                                                                         "merged_text"))
        # ... and never its repository's credentials or its last sync's report.
        PAGE_NOT_READ.extend(f"git_link__repository__{field}" for field in ("password", "ssh_key", "webhook_secret",
                                                                             "last_sync", "error", "username", "mode",
                                                                             "synced_commit", "synced_at"))
