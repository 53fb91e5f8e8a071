"""What accounts tells the apps above it. Receivers run in the sender's transaction, so a token
created or revoked cannot be committed without what they record (the audit log listens)."""

from django.dispatch import Signal

# sender: the ApiToken model; kwargs: token, actor, via. Sent inside the creating transaction.
token_created = Signal()
# sender: the ApiToken model; kwargs: token, actor, via. Sent before the row is deleted.
token_revoked = Signal()
# Single sign-on (accounts/sso.py), each sent inside the transaction of what it reports.
# sender: "sso"; kwargs: user, before (the role before, or None), role, groups (what the
# provider sent), client (the browser's address).
sso_signed_in = Signal()
# sender: "sso"; kwargs: user (None for a first sign-in), who (user name or subject), reason,
# groups, issuer, subject, client.
sso_refused = Signal()
# sender: "sso"; kwargs: kind (accounts.idp.IdpError's), message, client. Nobody is known yet.
sso_failed = Signal()
