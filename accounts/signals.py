"""What accounts tells the apps above it. Receivers run in the sender's transaction, so a token
created or revoked cannot be committed without what they record (the audit log listens)."""

from django.dispatch import Signal

# sender: the ApiToken model; kwargs: token, actor, via. Sent inside the creating transaction.
token_created = Signal()
# sender: the ApiToken model; kwargs: token, actor, via. Sent before the row is deleted.
token_revoked = Signal()
