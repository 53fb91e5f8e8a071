"""Every write of the OpenAI endpoint's settings: who may chat with a graph (policies), API
limits, and exposures through a cluster's gateway. A policy or limit change also forgets the
admissions remembered under the old one (admission.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from audit.services import audit_record
from core.spec import DNS1123_SUBDOMAIN
from graphs.models import Graph
from graphs.runtimes.kubernetes.gateway import gateway_objects

from . import admission
from .models import ApiLimit, GraphExposure, PlaygroundPolicy

if TYPE_CHECKING:
    from accounts.roles import Actor


@transaction.atomic
def policy_set(*, graph: Graph, viewers_may_chat: bool, user: Actor = None, via: str = "ui") -> PlaygroundPolicy:
    before = PlaygroundPolicy.objects.filter(graph=graph).values_list("viewers_may_chat", flat=True).first()
    policy, _ = PlaygroundPolicy.objects.update_or_create(
        graph=graph, defaults={"viewers_may_chat": viewers_may_chat, "updated_by": user})
    audit_record(actor=user, via=via, action="playground.policy", target_type="graph", target=graph.name,
                 before={"viewers_may_chat": bool(before)}, after={"viewers_may_chat": viewers_may_chat})
    # Admissions remembered under the old policy must not outlive it (in this process; other
    # processes forget within PLAYGROUND_ADMISSION_TTL): now, and again once committed, in
    # case a request re-remembered the old policy in between.
    admission.forget()
    transaction.on_commit(admission.forget)
    return policy


@transaction.atomic
def api_limit_set(*, user, token_id: str = "", token_label: str = "", requests_per_minute: int | None,
                  concurrent_streams: int | None, by=None, via: str = "ui") -> ApiLimit:
    """Set the OpenAI endpoint's limits of ``user`` (token_id "") or of one of its tokens;
    None keeps a limit at the setting's default."""
    for name, value in (("requests_per_minute", requests_per_minute), ("concurrent_streams", concurrent_streams)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be a whole number of 0 or more (or empty for the default)")
    before = ApiLimit.objects.filter(user=user, token_id=token_id).values(
        "requests_per_minute", "concurrent_streams").first()
    limit, _ = ApiLimit.objects.update_or_create(
        user=user, token_id=token_id,
        defaults={"token_label": token_label, "requests_per_minute": requests_per_minute,
                  "concurrent_streams": concurrent_streams, "updated_by": by})
    audit_record(actor=by, via=via, action="playground.api_limit", target_type="user", target=user.username,
                 before=before or {}, after={"token": token_label or token_id or "(every request)",
                                             "requests_per_minute": requests_per_minute,
                                             "concurrent_streams": concurrent_streams})
    admission.forget()  # admissions carry their limits
    transaction.on_commit(admission.forget)
    return limit


@transaction.atomic
def api_limit_delete(*, limit: ApiLimit, by=None, via: str = "ui") -> None:
    audit_record(actor=by, via=via, action="playground.api_limit", target_type="user", target=limit.user.username,
                 before={"requests_per_minute": limit.requests_per_minute,
                         "concurrent_streams": limit.concurrent_streams}, after={})
    limit.delete()
    admission.forget()
    transaction.on_commit(admission.forget)


def exposure_objects(*, graph: Graph, dgd_name: str, namespace: str, spec, applied_only: bool = True) -> list[dict]:
    """The objects exposing ``graph`` through its cluster's gateway ([] without an exposure, or,
    with ``applied_only``, one not applied with the graph): what the runtime applies beside the DGD."""
    exposure = GraphExposure.objects.filter(graph=graph).first()
    if exposure is None or (applied_only and not exposure.apply_with_graph):
        return []
    frontend = next((s.name for s in spec.services if s.role == "frontend"), "Frontend")
    return gateway_objects(graph=graph.name, dgd_name=dgd_name, namespace=namespace, frontend=frontend,
                           exposure=exposure.options)


@transaction.atomic
def exposure_set(*, graph: Graph, host: str, gateway_name: str = "", gateway_namespace: str = "",
                 ingress_class: str = "", tls_secret: str = "", apply_with_graph: bool = False, by=None,
                 via: str = "ui") -> GraphExposure:
    """Expose ``graph``'s OpenAI endpoint through its cluster's gateway on ``host`` (a Gateway
    API Gateway, an ingress-nginx class, or both). Raises ValueError naming the field."""
    values = {"host": host.strip().lower(), "gateway_name": gateway_name.strip(),
              "gateway_namespace": gateway_namespace.strip(), "ingress_class": ingress_class.strip(),
              "tls_secret": tls_secret.strip()}
    for name, value in values.items():
        if value and (len(value) > 253 or not DNS1123_SUBDOMAIN.match(value)):
            raise ValueError(f"{name}: {value!r} is not a Kubernetes/DNS name (lower-case letters, digits, '-', '.')")
    if not values["host"]:
        raise ValueError("host: the hostname clients will call, e.g. llm.example.com")
    if not values["gateway_name"] and not values["ingress_class"]:
        raise ValueError("gateway_name: name a Gateway API Gateway, an ingress class, or both")
    values["apply_with_graph"] = bool(apply_with_graph)
    before = GraphExposure.objects.filter(graph=graph).values(*values).first()
    exposure, _ = GraphExposure.objects.update_or_create(graph=graph, defaults={**values, "updated_by": by})
    audit_record(actor=by, via=via, action="playground.exposure", target_type="graph", target=graph.name,
                 before=before or {}, after=values)
    return exposure


@transaction.atomic
def exposure_delete(*, graph: Graph, by=None, via: str = "ui") -> None:
    before = GraphExposure.objects.filter(graph=graph).values("host").first()
    if before:
        GraphExposure.objects.filter(graph=graph).delete()
        audit_record(actor=by, via=via, action="playground.exposure", target_type="graph", target=graph.name,
                     before=before, after={})
