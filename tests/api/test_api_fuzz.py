"""schemathesis against the OpenAPI schema, with every check it has: generated requests to
every operation find no 5xx and no answer the schema does not describe. Authenticated as an admin (every endpoint
reachable); the app runs in-process on the test database."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.core.errors import InvalidRegexPattern

from accounts.tokens import token_create
from core.catalog import PoolFields, build_spec
from graphs import services

# A 422 is a request of the stated shape whose content rules no JSON Schema states refuse (a
# manifest's CRD and operational rules, a Planner's thresholds, AIConfigurator's support matrix):
# positive_data_acceptance counts it as accepted, as schemathesis.toml tells the CLI run.
UNPROCESSABLE = 422
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
    # The API stores text: NUL is refused with a 400 by design (see controlplane/openapi.py).
    schema.config.generation.update(allow_x00=False, codec="utf-8")
    schema = schema.exclude(path_regex=EXCLUDED_PATHS)
    if os.environ.get("FUZZ_ONLY"):  # a path regex: explore a few operations harder
        schema = schema.include(path_regex=os.environ["FUZZ_ONLY"])
    yield schema, key
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def _operations(schema):
    for result in schema.get_all_operations():
        yield result.ok()


def _all_checks():
    load_all_checks()
    return CHECKS.get_all()


def _first_line(group: BaseException) -> str:
    failures = getattr(group, "exceptions", None) or [group]
    return "; ".join(getattr(f, "title", None) or str(f).splitlines()[0] for f in failures)[:300]


def _fuzz(operation, mode, headers, checks, totals, failures) -> None:
    """Generated cases of one operation in one mode, every check on each answer."""
    where = f"{operation.method.upper()} {operation.path} [{mode.value}]"

    @settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "10")), deadline=None, database=None,
              derandomize=os.environ.get("FUZZ_RANDOM") != "1", suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        totals["cases"] += 1
        totals[f"cases_{mode.value}"] += 1
        response = case.call(headers=headers)
        for check in checks:
            if check.__name__ == "positive_data_acceptance" and response.status_code == UNPROCESSABLE:
                totals["judged_document_refusals"] += 1
                continue
            try:
                case.validate_response(response, checks=[check], headers=headers, transport_kwargs={"headers": headers})
            except (Exception, BaseExceptionGroup) as exc:
                detail = f" {response.text[:300]!r}\n{str(exc)[:1500]}" if os.environ.get("FUZZ_DETAILS") else ""
                failures[check.__name__].append(f"{where} -> {response.status_code}: {_first_line(exc)}{detail}")

    try:
        run()
    except InvalidRegexPattern as exc:  # the schema states a pattern schemathesis cannot generate from
        failures["generation"].append(f"{where}: {str(exc)[:200]}")
    except Unsatisfiable:
        # Nothing to negate (an operation without parameters or body): no invalid request exists.
        totals[f"operations_without_{mode.value}_cases"] += 1


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="seconds")


def test_generated_requests_pass_every_schemathesis_check(api_schema):
    """Every check schemathesis has (server errors, status codes, content types, headers,
    response schemas, negative data refused, positive data accepted, auth, methods...), on
    data generated from the schema (valid) and against it (invalid). FUZZ_EXAMPLES sets the
    examples per operation and mode; FUZZ_RANDOM=1 explores new examples; FUZZ_REPORT=path
    writes the totals as JSON."""
    api_schema, key = api_schema
    headers = {"Authorization": "Token " + key}
    checks = _all_checks()
    assert len(checks) >= 12, [c.__name__ for c in checks]
    totals: Counter[str] = Counter()
    failures: dict[str, list[str]] = defaultdict(list)
    operations = list(_operations(api_schema))
    assert len(operations) > (0 if os.environ.get("FUZZ_ONLY") else 20), "the schema lost its operations"
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz(operation, mode, headers, checks, totals, failures)
    summary = {"operations": len(operations), **totals, "checks": [c.__name__ for c in checks],
               "failures": sum(len(found) for found in failures.values()),
               "failures_by_check": {name: len(found) for name, found in sorted(failures.items())},
               "distinct_failures": sorted({f"{name}: {line}" for name, found in failures.items() for line in found})}
    if os.environ.get("FUZZ_REPORT"):
        from bench.record import machine, provenance

        knobs = " ".join(f"{k}={os.environ[k]}" for k in ("FUZZ_RANDOM", "FUZZ_EXAMPLES", "FUZZ_ONLY", "FUZZ_REPORT")
                         if os.environ.get(k))
        made = {"command": f"{knobs} python -m pytest tests/api/test_api_fuzz.py", "date": _now(), **provenance(),
                "machine": machine()}
        Path(os.environ["FUZZ_REPORT"]).write_text(json.dumps({**made, **summary}, indent=2) + "\n")
    print(json.dumps(summary))
    report = [f"{name}: {line}" for name, found in sorted(failures.items()) for line in sorted(set(found))]
    assert not report, f"{len(report)} distinct failures\n" + "\n".join(report[:300])
