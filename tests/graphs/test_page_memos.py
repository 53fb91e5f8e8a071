"""What pages render once and reuse (graphs.fragments, accounts.backends) is never stale: each
change to what a page shows is shown by the next request, in the process that made it."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.utils import timezone

from core.catalog import PoolFields, build_spec
from graphs import services
from graphs.models import Deployment, Event, Graph, Operation, Pod
from tests import factories

HTMX = {"HTTP_HX_REQUEST": "true"}


def text(response) -> str:
    assert response.status_code == 200, response.status_code
    return html.unescape(response.content.decode())


@pytest.fixture
def served(db):
    """A graph applied to the local runtime with one decode pod that is not ready yet."""
    graph = factories.graph("memo", backend="mocker")
    deployment = Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True,
                                           state="progressing")
    Pod.objects.create(deployment=deployment, name="memo-decode-0", service="decode", role="decode",
                       phase="Pending", started_at=timezone.now() - timedelta(minutes=3))
    return graph


@pytest.fixture
def viewer(client_for):
    return client_for("viewer")


def pod_row(page: str) -> str:
    start = page.index('data-pod="memo-decode-0"')
    return page[start:page.index("</tr>", start)]


def test_the_status_shows_each_change_of_a_pod(served, viewer):
    url = "/graphs/memo/status/"
    before = pod_row(text(viewer.get(url, **HTMX)))
    assert "0/1" in before and "Pending" in before and "<td>0</td>" in before
    Pod.objects.filter(name="memo-decode-0").update(ready=True, phase="Running", restarts=2, shm_bytes=16 << 30)
    after = pod_row(text(viewer.get(url, **HTMX)))
    assert "1/1" in after and "Running" in after and "<td>2</td>" in after and "16.0\xa0GB" in after


def test_a_pods_age_moves_with_the_clock(served, viewer):
    assert "<td>3m</td>" in pod_row(text(viewer.get("/graphs/memo/status/", **HTMX)))
    Pod.objects.filter(name="memo-decode-0").update(started_at=timezone.now() - timedelta(hours=5))
    assert "<td>5h</td>" in pod_row(text(viewer.get("/graphs/memo/status/", **HTMX)))


def test_new_events_and_an_operation_finishing_are_shown(served, viewer, users):
    page = text(viewer.get("/graphs/memo/status/", **HTMX))
    assert "No events." in page and "None yet." in page
    Event.objects.create(graph=served, at=timezone.now(), reason="Scheduled", object="memo-decode-0",
                         message="assigned to this host")
    op = Operation.objects.create(graph=served, kind="scale", state="running", requested_by=users["operator"],
                                  via="api")
    page = text(viewer.get("/graphs/memo/status/", **HTMX))
    assert "assigned to this host" in page and f"Operation #{op.pk}: scale is running" in page
    assert "scale</strong> running · operator via api" in page
    Operation.objects.filter(pk=op.pk).update(state="succeeded", result="decode: 1 -> 2")
    page = text(viewer.get("/graphs/memo/status/", **HTMX))
    assert f"Operation #{op.pk}" not in page and "succeeded" in page and "decode: 1 -> 2" in page


def test_the_graph_page_shows_the_new_revisions_spec(served, viewer):
    first = text(viewer.get("/graphs/memo/"))
    assert "revision 1" in first
    spec = served.head.graph_spec
    services.graph_update(graph=Graph.objects.get(name="memo"),
                          spec=build_spec(template="mocker-disagg", name="memo", backend="mocker", model="other-model",
                                          decode=PoolFields(replicas=3)),
                          message="more decode")
    page = text(viewer.get("/graphs/memo/"))
    assert "revision 2" in page and "other-model" in page and spec.model not in page.split("Manifest")[0]
    manifest = text(viewer.get("/graphs/memo/?fragment=manifest&apiVersion=nvidia.com/v1alpha1", **HTMX))
    assert "other-model" in manifest and "apiVersion: nvidia.com/v1alpha1" in manifest


def test_the_list_shows_pod_counts_and_state_as_they_change(served, viewer):
    row = text(viewer.get("/graphs/")).split('href="/graphs/memo/"')[1].split("</tr>")[0]
    assert "0/1" in row and "Progressing" in row
    Pod.objects.filter(name="memo-decode-0").update(ready=True)
    Deployment.objects.filter(graph=served).update(state="ready")
    row = text(viewer.get("/graphs/")).split('href="/graphs/memo/"')[1].split("</tr>")[0]
    assert "1/1" in row and "Ready" in row


def test_the_links_follow_the_role(client_for):
    assert 'href="/clusters/"' in text(client_for("admin").get("/graphs/"))
    viewer_page = text(client_for("viewer").get("/graphs/"))
    assert 'href="/clusters/"' not in viewer_page and 'href="/graphs/new/"' not in viewer_page
    assert 'href="/graphs/new/"' in text(client_for("operator").get("/graphs/"))


# ------------------------------------------------------------------ the session's user, remembered


def test_a_deactivated_user_is_refused_at_once(client_for, users):
    viewer = client_for("viewer")
    assert viewer.get("/graphs/").status_code == 200
    users["viewer"].is_active = False
    users["viewer"].save()
    assert viewer.get("/graphs/").status_code == 302  # to the login page


def test_a_role_change_takes_effect_at_once(client_for, users):
    from django.contrib.auth.models import Group

    viewer = client_for("viewer")
    assert viewer.get("/graphs/new/").status_code == 403
    users["viewer"].groups.add(Group.objects.get(name="operator"))
    assert viewer.get("/graphs/new/").status_code == 200
    Group.objects.get(name="operator").user_set.remove(users["viewer"])  # from the group's side
    assert viewer.get("/graphs/new/").status_code == 403


def test_a_password_change_ends_the_other_sessions(client_for, users):
    viewer = client_for("viewer")
    assert viewer.get("/graphs/").status_code == 200
    users["viewer"].set_password("another-pw-123456")
    users["viewer"].save()
    assert viewer.get("/graphs/").status_code == 302


def test_each_request_gets_its_own_copy_of_the_user(users):
    from accounts.backends import SessionUserBackend

    backend = SessionUserBackend()
    first = backend.get_user(users["viewer"].pk)
    first.first_name = "changed by one request"
    second = backend.get_user(users["viewer"].pk)
    assert second is not first and second.first_name == ""
    assert second.username == "viewer"


def test_with_no_ttl_every_request_reads_the_user(users, settings, django_assert_num_queries):
    from accounts.backends import SessionUserBackend

    backend = SessionUserBackend()
    settings.SESSION_USER_TTL = 0
    with django_assert_num_queries(1):
        backend.get_user(users["viewer"].pk)
    with django_assert_num_queries(1):
        backend.get_user(users["viewer"].pk)
    settings.SESSION_USER_TTL = 5
    backend.get_user(users["viewer"].pk)
    with django_assert_num_queries(0):
        assert backend.get_user(users["viewer"].pk).username == "viewer"


# ------------------------------------------------------------------ which pool serves a path


@pytest.mark.parametrize(("path", "headers", "waits"), [
    ("/metrics/", [], False),  # the overview page reads only the database
    ("/metrics/", [(b"hx-request", b"true")], True),  # its numbers wait on Prometheus
    ("/metrics/graphs/memo/chart/", [], True),
    ("/api/graphs/memo/planner/", [], True),
    ("/graphs/", [], False),
    ("/graphs/memo/status/", [(b"hx-request", b"true")], False),
    ("/repos/gitops/sync/", [], True),  # waits on the Git host
    ("/api/repos/gitops/sync/", [], True),
    ("/repos/gitops/", [], False),
    ("/auth/oidc/login/", [], True),  # waits on the identity provider
    ("/auth/oidc/callback/", [], True),
    ("/logout/", [], True),
    ("/login/", [], False),  # the break-glass login never queues behind the provider
    ("/static/css/app.css", [], True),  # a file a slow client reads
    ("/clusters/", [], True),  # a cluster's API server
    ("/api/clusters/", [], True),
    ("/api/clusters/east/", [], True),
    ("/benchmarks/runs/3/artifacts/", [], True),
    ("/api/benchmarks/runs/", [], True),
    ("/api/benchmarks/compare/", [], True),
    ("/api/metrics/graphs/memo/", [], True),
    ("/api/graphs/", [], False),
    ("/api/graphs/memo/", [], False),
    ("/api/repos/gitops/", [], False),  # the repository's record; only its sync waits on the host
    ("/no/such/page/", [], False),
])
def test_pages_that_wait_on_other_services_have_their_own_pool(path, headers, waits):
    from controlplane import asgi

    assert asgi._waits({"type": "http", "path": path, "headers": headers}, asgi._wait_of(path)) is waits


def test_an_async_view_runs_on_the_event_loop_because_it_is_async_not_because_of_its_path(settings):
    """A graph page's stream holds no thread (graphs.live): the server sees that its view is a
    coroutine, as it would any new async view, and no other."""
    from django.urls import path

    from controlplane import asgi, urls

    async def ticker(request):  # a new async view: no edit of the server
        raise AssertionError("not called")

    settings.ROOT_URLCONF = type("Urls", (), {"urlpatterns": [path("ticker/", ticker), *urls.urlpatterns]})
    asgi._wait_of.cache_clear()
    try:
        assert asgi._wait_of("/ticker/") is asgi.ASYNC
        assert asgi._wait_of("/graphs/memo/events/") is asgi.ASYNC
        assert asgi._wait_of("/graphs/memo/status/") is not asgi.ASYNC
        assert asgi._wait_of("/graphs/memo/") is None
    finally:
        asgi._wait_of.cache_clear()


def test_a_view_says_what_it_waits_on_wherever_it_is_declared():
    """Which pool runs a view is said by the view (availability/waiting.py), read through the URL
    map: a function, a view class, a viewset, one action of a viewset, a whole URL list."""
    from django.urls import resolve

    from availability.waiting import wait_of

    assert wait_of(resolve("/metrics/graphs/memo/chart/").func).on == "Prometheus"  # a URL list
    assert wait_of(resolve("/metrics/").func).htmx_only  # a function, its fragment only
    assert wait_of(resolve("/api/clusters/").func).on == "a cluster's API server"  # a viewset
    assert wait_of(resolve("/api/repos/gitops/sync/").func).on == "the Git host"  # one action
    assert wait_of(resolve("/api/repos/gitops/").func) is None  # not the viewset's other routes
    assert wait_of(resolve("/auth/oidc/callback/").func).on == "the identity provider"
    assert wait_of(resolve("/graphs/").func) is None
