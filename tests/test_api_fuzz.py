"""schemathesis against the OpenAPI schema: generated requests to every operation find no
5xx and no response that violates the schema. Authenticated as an admin (every endpoint
reachable); the app runs in-process on the test database."""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from accounts.tokens import token_create
from graphs import services
from graphs.catalog import PoolFields, build_spec

# Streams and long-running launches are exercised by their own tests, not fuzzed.
EXCLUDED_PATHS = r"^/api/playground/|^/api/benchmarks/.*/(run|sweep|ab)|/log/$|^/api/clusters/.*/(secret|token)"


@pytest.fixture
def api_schema(db, django_user_model):
    from controlplane.wsgi import application

    admin = django_user_model.objects.create_superuser("fuzz", "f@x", "pw-fuzz-12345")
    key = token_create(user=admin, name="fuzz", via="system")[1]
    spec = build_spec(template="mocker-disagg", name="fuzzed", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    services.graph_create(spec=spec, user=admin)
    # As Django's test client does: requests must not close the test transaction's connection.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
    yield schema.exclude(path_regex=EXCLUDED_PATHS), key
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def _operations(schema):
    for result in schema.get_all_operations():
        yield result.ok()


def test_generated_requests_never_get_a_5xx_or_a_response_outside_the_schema(api_schema):
    api_schema, key = api_schema
    headers = {"Authorization": "Token " + key}
    checks = [not_a_server_error, response_schema_conformance, content_type_conformance]
    failures: list[str] = []
    operations = list(_operations(api_schema))
    assert len(operations) > 20, "the schema lost its operations"
    for operation in operations:

        @settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "10")), deadline=None, database=None,
                  derandomize=os.environ.get("FUZZ_RANDOM") != "1",
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                         HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
        @given(case=operation.as_strategy())
        def run(case):
            case.call_and_validate(headers=headers, checks=checks)

        try:
            run()
        except (Exception, BaseExceptionGroup) as exc:  # collect every operation's failure, then report all
            failures.append(f"{operation.method.upper()} {operation.path}: {str(exc)[:800]}")
    assert not failures, "\n\n".join(failures)
