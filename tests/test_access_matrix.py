"""Every URL of the product, for every role and for anonymous users: default deny.

The walker enumerates the URL configuration itself, so a page or endpoint added later is
covered without anyone listing it. For each URL and unsafe method it checks that
* anonymous users and signed-in users without a role never get a 2xx (nor a 5xx);
* viewers never change anything (no 2xx or redirect-after-success on unsafe methods), except
  on the few endpoints that only read (validation, the YAML editor's live check);
* no role ever gets a 5xx;
* with CSRF enforced, no unsafe request authenticated by a session cookie succeeds without
  the token."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from core.catalog import PoolFields, build_spec
from graphs import services

pytestmark = pytest.mark.django_db

# Reachable without a login by design.
# The API's description (schema and its docs page) is public like any published spec; "/"
# only redirects to the graph list, which asks for a login.
PUBLIC = re.compile(r"^/($|login/|logout/|healthz|readyz|favicon\.ico|api/schema/|api/docs/|static/"
                    r"|admin/login/|admin/logout/)")
# Unsafe methods that only read (they validate input, change nothing): viewers may use them.
VIEWER_READ_ONLY_POSTS = re.compile(r"^/(graphs/check/|api/validate/)")
SAMPLES = {"name": "matrix", "graph": "matrix", "pod": "matrix-frontend-0", "number": "1", "pk": "1", "id": "1",
           "format": "json", "key": "1", "run": "1", "cluster": "1", "object_id": "1", "app_label": "graphs",
           "model_name": "graph", "content_type_id": "1"}
UNSAFE = ("post", "put", "patch", "delete")
# The chat proxy answers 502/503/504 by design when the graph's frontend is not serving (as
# any gateway does); everywhere else a 5xx is a bug.
GATEWAY = re.compile(r"^/api/playground/")


def _server_error(url: str, status: int) -> bool:
    return status >= 500 and not (GATEWAY.match(url) and status in (502, 503, 504))


def _walk(resolver, prefix=""):
    for entry in resolver.url_patterns:
        pattern = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _walk(entry, pattern)
        elif isinstance(entry, URLPattern):
            yield pattern


def _concrete(pattern: str) -> str | None:
    """A URL for a pattern, with sample values for its parameters (None if we cannot)."""
    text = pattern.replace("^", "").replace("$", "").replace("\\Z", "").replace("\\.", ".")
    text = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: SAMPLES.get(m.group(1), "1"), text)
    text = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: SAMPLES.get(m.group(1), "1"), text)
    text = text.replace("/?", "/")
    if re.search(r"[()\[\]*+?|\\]", text):
        return None
    return "/" + text.lstrip("/")


def all_urls() -> list[str]:
    urls = {u for u in (_concrete(p) for p in _walk(get_resolver())) if u}
    urls = {u for u in urls if not u.startswith(("/admin/", "/static/")) and ".json" not in u
            and not u.endswith((".api", ".yaml"))}
    return sorted(urls)


@pytest.fixture
def world(users):
    spec = build_spec(template="mocker-disagg", name="matrix", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    services.graph_create(spec=spec)


def _request(client, method, url):
    return getattr(client, method)(url, data={} if method == "post" else None, follow=False)


def test_the_walker_finds_the_products_urls():
    urls = all_urls()
    assert "/graphs/" in urls and "/graphs/matrix/" in urls and "/api/graphs/" in urls
    assert len(urls) > 30


@pytest.mark.parametrize("who", ["anonymous", "nobody"])
def test_users_without_a_role_get_nothing_anywhere(world, who, client_for):
    client = Client() if who == "anonymous" else client_for("norole")
    leaks = []
    for url in all_urls():
        if PUBLIC.match(url):
            continue
        for method in ("get", *UNSAFE):
            response = _request(client, method, url)
            if response.status_code < 300 or response.status_code >= 500:
                leaks.append(f"{method.upper()} {url} -> {response.status_code}")
            if 300 <= response.status_code < 400 and "/login/" not in response.get("Location", ""):
                leaks.append(f"{method.upper()} {url} -> redirect to {response.get('Location')}")
    assert not leaks, "\n".join(leaks)


def test_viewers_read_but_never_change_anything(world, client_for):
    client = client_for("viewer")
    problems = []
    for url in all_urls():
        if PUBLIC.match(url):
            continue
        response = _request(client, "get", url)
        if response.status_code >= 500:
            problems.append(f"GET {url} -> {response.status_code}")
        if VIEWER_READ_ONLY_POSTS.match(url):
            continue
        for method in UNSAFE:
            response = _request(client, method, url)
            if response.status_code < 400 or response.status_code >= 500:
                problems.append(f"{method.upper()} {url} -> {response.status_code}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("role", ["operator", "admin"])
def test_no_role_ever_gets_a_server_error(world, role, client_for):
    client = client_for(role)
    errors = []
    for url in all_urls():
        for method in ("get", *UNSAFE):
            response = _request(client, method, url)
            if _server_error(url, response.status_code):
                errors.append(f"{method.upper()} {url} -> {response.status_code}")
    assert not errors, "\n".join(errors)


def test_no_unsafe_request_succeeds_without_the_csrf_token(world, users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["admin"])
    accepted = []
    for url in all_urls():
        for method in UNSAFE:
            response = _request(client, method, url)
            # Refused is what matters: 403 from the CSRF check, or 415 where reading the body for
            # the CSRF token already fails on its media type (DRF parses it lazily).
            if response.status_code < 400 or response.status_code >= 500:
                accepted.append(f"{method.upper()} {url} -> {response.status_code}")
    assert not accepted, "\n".join(accepted)


def _api_twin(url: str, urls: set[str]) -> str | None:
    twin = "/api" + url
    return twin if twin in urls else None


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_a_page_and_its_api_twin_follow_one_rule(world, role, client_for, api_for):
    """What a role may not read on a page (/clusters/), it may not read from the API either
    (/api/clusters/), and the other way round."""
    urls = set(all_urls())
    page_client, api_client = client_for(role), api_for(role)
    pairs = [(url, twin) for url in sorted(urls) if not url.startswith("/api/") and not PUBLIC.match(url)
             and (twin := _api_twin(url, urls))]
    assert ("/clusters/", "/api/clusters/") in pairs and ("/audit/", "/api/audit/") in pairs
    differ = []
    compared = 0
    for page, twin in pairs:
        page_status, api_status = page_client.get(page).status_code, api_client.get(twin).status_code
        if {page_status, api_status} - {200, 403}:
            continue  # not both readable resources (a form page and a POST-only endpoint, say)
        compared += 1
        page_refused, api_refused = page_status == 403, api_status == 403
        if page_refused != api_refused:
            differ.append(f"{page} {'refused' if page_refused else 'allowed'}, {twin} "
                          f"{'refused' if api_refused else 'allowed'}")
    assert compared >= 2
    assert not differ, "\n".join(differ)
