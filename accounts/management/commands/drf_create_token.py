"""``drf_create_token <username>``, as DRF's command was called: the same as create_token,
for scripts and instructions written for it."""

from .create_token import Command as CreateToken


class Command(CreateToken):
    help = "Alias of create_token: create an API token for a user and print it."
