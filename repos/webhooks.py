"""Push webhooks from GitHub, GitLab and Gitea (and Forgejo, which speaks Gitea's), checked
against the repository's shared secret. Pure: headers and body in, a verdict out.

- GitHub signs the body: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256>``.
- Gitea signs it too, bare hex, in ``X-Gitea-Signature`` (Forgejo: ``X-Forgejo-Signature``).
- GitLab sends the secret itself in ``X-Gitlab-Token``.
Each compares in constant time. All three put the pushed ref in the payload's ``ref``."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass


class WebhookRefused(Exception):
    """The call is not a genuine push from the repository's host (status: 401 or 400)."""

    def __init__(self, message: str, status: int = 401):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Push:
    provider: str  # github | gitlab | gitea
    event: str  # the provider's event name
    ref: str  # refs/heads/<branch>, "" for an event that is not a push (a ping)
    after: str  # the pushed commit, when the payload says
    delivery: str = ""  # the host's id of this delivery (a retry or a replay carries the same)

    @property
    def branch(self) -> str:
        return self.ref.removeprefix("refs/heads/") if self.ref.startswith("refs/heads/") else ""


def _hmac(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(headers, body: bytes, secret: str) -> Push:
    """The push this call reports, once its secret checks out. ``headers`` is case-insensitive
    (Django's ``request.headers``)."""
    if not secret:
        raise WebhookRefused("this repository has no webhook secret: set one, then configure the same "
                             "secret on the repository's webhook", status=403)
    if headers.get("X-Hub-Signature-256"):
        provider, event = "github", headers.get("X-GitHub-Event", "")
        given = headers["X-Hub-Signature-256"].removeprefix("sha256=")
        ok = hmac.compare_digest(given.encode(), _hmac(secret, body).encode())
    elif headers.get("X-Gitea-Signature") or headers.get("X-Forgejo-Signature"):
        provider = "gitea"
        event = headers.get("X-Gitea-Event") or headers.get("X-Forgejo-Event") or ""
        given = headers.get("X-Gitea-Signature") or headers.get("X-Forgejo-Signature")
        ok = hmac.compare_digest(given.encode(), _hmac(secret, body).encode())
    elif headers.get("X-Gitlab-Token") is not None:
        provider, event = "gitlab", headers.get("X-Gitlab-Event", "")
        ok = hmac.compare_digest(headers["X-Gitlab-Token"].encode(), secret.encode())
    else:
        raise WebhookRefused("no signature: expected X-Hub-Signature-256 (GitHub), X-Gitea-Signature (Gitea) "
                             "or X-Gitlab-Token (GitLab)")
    if not ok:
        raise WebhookRefused(f"the {provider} signature does not match this repository's webhook secret")
    try:
        payload = json.loads(body or b"{}")
    except ValueError:
        raise WebhookRefused("the body is not JSON (configure the webhook's content type as application/json)",
                             status=400) from None
    if not isinstance(payload, dict):
        raise WebhookRefused("the body is not a JSON object", status=400)
    ref = payload.get("ref") if isinstance(payload.get("ref"), str) else ""
    after = payload.get("after") if isinstance(payload.get("after"), str) else ""
    delivery = (headers.get("X-GitHub-Delivery") or headers.get("X-Gitea-Delivery")
                or headers.get("X-Forgejo-Delivery") or headers.get("X-Gitlab-Event-UUID") or "")
    return Push(provider, event, ref, after, delivery.strip()[:200])
