"""Mint an API token for a user and print its key (the only time it is shown)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts import tokens


class Command(BaseCommand):
    help = "Create an API token for a user and print it (send it as 'Authorization: Token <key>')."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="what or who uses it (default: cli)")
        parser.add_argument("--days", type=int, default=tokens.DEFAULT_DAYS,
                            help=f"expiry in days, 1 to {tokens.MAX_DAYS} (default {tokens.DEFAULT_DAYS}); "
                                 "0: never expires")

    def handle(self, *args, username, name, days, **opts):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        try:
            _token, key = tokens.token_create(user=user, name=name, days=days or None, via="cli")
        except tokens.TokenError as exc:
            raise CommandError(f"{exc.field}: {exc}") from None
        self.stdout.write(key)
