"""Push webhooks under replay (issue #42): a captured, correctly signed delivery sent 200 times
queued 200 syncs on the worker slots that applies and scales need. A delivery is taken once,
and a burst of pushes queues one sync while that one has not started."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from django.core.cache import cache

from repos import services

pytestmark = pytest.mark.django_db
SECRET = "s3cret-webhook"


@pytest.fixture(autouse=True)
def _clean(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    cache.clear()
    yield
    cache.clear()


def _post(client, body: bytes, delivery: str):
    sig = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return client.post("/api/repos/fleet/webhook/", body, content_type="application/json",
                       HTTP_X_HUB_SIGNATURE_256=f"sha256={sig}", HTTP_X_GITHUB_EVENT="push",
                       HTTP_X_GITHUB_DELIVERY=delivery)


def test_a_replayed_delivery_queues_one_sync(client, django_capture_on_commit_callbacks):
    services.repository_create(name="fleet", url="file:///nowhere.git", webhook_secret=SECRET)
    body = json.dumps({"ref": "refs/heads/main", "after": "a" * 40}).encode()
    with django_capture_on_commit_callbacks() as callbacks:
        answers = [_post(client, body, "delivery-1") for _ in range(200)]
    assert answers[0].status_code == 202
    assert {a.status_code for a in answers[1:]} == {200}
    assert "was taken already" in answers[1].json()["detail"]
    assert len(callbacks) == 1


def test_a_burst_of_pushes_queues_one_sync_until_it_starts(client, django_capture_on_commit_callbacks):
    repo = services.repository_create(name="fleet", url="file:///nowhere.git", webhook_secret=SECRET)
    body = json.dumps({"ref": "refs/heads/main"}).encode()
    with django_capture_on_commit_callbacks() as callbacks:
        burst = [_post(client, body, f"push-{n}") for n in range(20)]
    assert {a.status_code for a in burst} == {202} and len(callbacks) == 1
    assert "will take it" in burst[-1].json()["detail"]
    services.sync_starting(repo.pk)  # what repos.tasks.repository_sync does first
    with django_capture_on_commit_callbacks() as callbacks:
        assert _post(client, body, "push-after-start").status_code == 202
    assert len(callbacks) == 1
