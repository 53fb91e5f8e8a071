"""The Kubernetes runtime, and the only module that imports the official kubernetes client.

Everything the control plane does to or reads from a cluster goes through ``KubeClient``:
objects travel as plain dicts (``response_type="object"``: no client-side model validation,
which rejects a whole list for one odd object), and every failure becomes a ``KubeFailure``
(a RuntimeFailure) carrying the API server's own message.

Client pitfalls handled here (shared/notes/k8s-emulator.md §4):
* urllib3's hidden retries are off (``Configuration.retries = False``): transient failures
  (no answer, timeouts, 429, 5xx) are retried here, a bounded number of times with back-off
  and ``Retry-After``; 4xx never are.
* Timeouts are ``(connect, read)`` tuples: the client silently ignores a float.
* JSON patch and server-side apply need an explicit Content-Type, so they go through
  ``ApiClient.call_api``: the generated ``patch_*`` methods always send merge patches.
* Watches use ``watch=true`` and an explicit ``timeoutSeconds``, so the server ends the
  stream and a 410 surfaces at once (the client's own Watch swallows the first one).
"""

from __future__ import annotations

import base64
import copy
import difflib
import json
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import urllib3
from django.conf import settings
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from ..errors import RuntimeFailure
from ..manifest import V1ALPHA1
from ..models import GraphState
from ..specio import dump_yaml
from .base import ApplyResult, Target
from .kubestatus import GpuSummary, gpu_summary

log = logging.getLogger(__name__)

FIELD_MANAGER = "dynamo-control-plane"
DGD = "dynamographdeployments"
DGDSA = "dynamographdeploymentscalingadapters"
GROUP = "nvidia.com"
APPLY_PATCH = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
_CONFLICT_WITH = re.compile(r'conflict with "([^"]+)"')
_NOISE_METADATA = ("managedFields", "resourceVersion", "uid", "generation", "creationTimestamp", "selfLink")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class KubeFailure(RuntimeFailure):
    """A cluster call that failed: ``status`` is the HTTP status (0: no answer at all) and the
    message quotes the API server."""

    def __init__(self, message: str, *, status: int = 0, transient: bool = False, body: dict | None = None):
        super().__init__(message, transient=transient)
        self.status = status
        self.body = body or {}

    @property
    def unreachable(self) -> bool:
        return self.status == 0


class WatchExpired(Exception):
    """410 Gone: the watch's resourceVersion left the server's history; list again."""


# ------------------------------------------------------------------------------------ client


def _configuration(cluster) -> k8s.Configuration:
    configuration = k8s.Configuration()
    try:
        if cluster.in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(config_file=cluster.kubeconfig or None, context=cluster.context or None,
                                        client_configuration=configuration, persist_config=False)
    except Exception as exc:  # the loaders raise ConfigException, OSError, YAML and key errors alike
        raise KubeFailure(f"cannot load the connection settings of cluster {cluster.name} "
                          f"({cluster.connection_label}): {exc}") from None
    # urllib3 would otherwise retry dropped connections and 429/503 invisibly (Retry(total=3)).
    configuration.retries = False
    return configuration


def connect(cluster) -> KubeClient:
    """A client for a registered cluster (a clusters.models.Cluster or its name)."""
    if isinstance(cluster, str):
        from clusters.models import Cluster

        found = Cluster.objects.filter(name=cluster).first()
        if found is None:
            raise KubeFailure(f"no cluster named {cluster!r} is registered")
        cluster = found
    return KubeClient(cluster.name, _configuration(cluster))


def _message(exc: ApiException) -> tuple[str, dict]:
    body: Any = {}
    if exc.body:
        try:
            body = json.loads(exc.body)
        except (TypeError, ValueError):
            body = {}
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"]), body
    text = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else str(exc.body or "")
    return (text.strip()[:500] or exc.reason or "no message"), body if isinstance(body, dict) else {}


def _api_failure(exc: ApiException, what: str) -> KubeFailure:
    status = int(exc.status or 0)
    message, body = _message(exc)
    return KubeFailure(f"{what}: {message} (HTTP {status})", status=status, body=body,
                       transient=status in TRANSIENT_STATUSES)


def _no_answer(exc: Exception, what: str, cluster: str) -> KubeFailure:
    reason = getattr(exc, "reason", None) or exc
    return KubeFailure(f"{what}: no answer from cluster {cluster}: {reason}", transient=True)


class KubeClient:
    """One cluster's API server. Returns plain JSON; raises only KubeFailure (and
    WatchExpired from ``watch``)."""

    def __init__(self, name: str, configuration: k8s.Configuration):
        self.name = name
        self.api = k8s.ApiClient(configuration)
        self.timeout = (settings.KUBERNETES_CONNECT_TIMEOUT, settings.KUBERNETES_READ_TIMEOUT)

    def close(self) -> None:
        self.api.rest_client.pool_manager.clear()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, path: str, *, what: str, query: list[tuple[str, str]] | None = None,
             body: Any = None, content_type: str = "application/json", response: str = "json") -> Any:
        """One request, retried with back-off while the failure is transient. ``response``:
        "json" (parsed), "text", or "none" (the body is neither read nor logged: secrets)."""
        attempts = max(1, settings.KUBERNETES_RETRIES)
        for attempt in range(1, attempts + 1):
            retry_after = None
            try:
                return self._once(method, path, query, body, content_type, response)
            except ApiException as exc:
                failure = _api_failure(exc, what)
                retry_after = (exc.headers or {}).get("Retry-After") if exc.headers else None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                failure = _no_answer(exc, what, self.name)
            if not failure.transient or attempt == attempts:
                if failure.transient:
                    failure.args = (f"{failure} (gave up after {attempts} attempts)",)
                raise failure
            delay = settings.KUBERNETES_RETRY_BACKOFF * 2 ** (attempt - 1)
            if retry_after and str(retry_after).isdigit():
                delay = max(delay, float(retry_after))
            delay = min(delay, settings.KUBERNETES_RETRY_MAX_DELAY)
            log.warning("%s; retrying in %.2fs (attempt %d of %d)", failure, delay, attempt, attempts)
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _once(self, method, path, query, body, content_type, response) -> Any:
        raw = response != "json"
        result = self.api.call_api(
            path, method, query_params=list(query or []), body=body, auth_settings=["BearerToken"],
            header_params={"Accept": "application/json", "Content-Type": content_type},
            response_type=None if raw else "object", _return_http_data_only=True, _preload_content=not raw,
            _request_timeout=self.timeout)
        if not raw:
            return result
        try:
            return result.data.decode(errors="replace") if response == "text" else None
        finally:
            result.release_conn()

    def get(self, path: str, *, what: str) -> dict | None:
        try:
            return self.call("GET", path, what=what)
        except KubeFailure as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, path: str, *, what: str, label_selector: str = "") -> dict:
        query = [("labelSelector", label_selector)] if label_selector else []
        return self.call("GET", path, what=what, query=query)

    def watch(self, path: str, *, what: str, resource_version: str, timeout: int,
              label_selector: str = "") -> Iterator[dict]:
        """Events after ``resource_version`` until the server ends the stream (``timeout`` s).
        BOOKMARK events are passed on: they only move the resourceVersion."""
        query = [("watch", "true"), ("resourceVersion", resource_version), ("timeoutSeconds", str(int(timeout))),
                 ("allowWatchBookmarks", "true")]
        if label_selector:
            query.append(("labelSelector", label_selector))
        try:
            stream = self.api.call_api(
                path, "GET", query_params=query, header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"], _return_http_data_only=True, _preload_content=False,
                _request_timeout=(self.timeout[0], int(timeout) + self.timeout[1]))
        except ApiException as exc:
            if exc.status == 410:
                raise WatchExpired(_message(exc)[0]) from None
            raise _api_failure(exc, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _no_answer(exc, what, self.name) from None
        try:
            for line in iter_resp_lines(stream):
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise WatchExpired(status.get("message", "expired"))
                    code = int(status.get("code") or 0)
                    raise KubeFailure(f"{what}: {status.get('message')} (HTTP {code})", status=code,
                                      transient=code in TRANSIENT_STATUSES)
                yield event
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _no_answer(exc, what, self.name) from None
        finally:
            stream.close()
            stream.release_conn()


# ------------------------------------------------------------------------------------ paths


def custom_path(api_version: str, plural: str, namespace: str, name: str = "", sub: str = "") -> str:
    path = f"/apis/{api_version}/namespaces/{namespace}/{plural}"
    return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def core_path(plural: str, namespace: str | None = None, name: str = "", sub: str = "") -> str:
    path = "/api/v1" + (f"/namespaces/{namespace}" if namespace else "") + f"/{plural}"
    return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def adapter_name(dgd: str, component: str) -> str:
    """The operator's DGDSA name (generateAdapterName): ``<dgd>-<lower(component)>``."""
    return f"{dgd}-{component.lower()}"


# ------------------------------------------------------------------------------------ cluster-wide reads


@dataclass
class ClusterHealth:
    server_version: str
    dgd_versions: list[str]
    dgdsa_versions: list[str]
    gpus: GpuSummary | None


def served_versions(kube: KubeClient) -> tuple[list[str], list[str]]:
    """The nvidia.com versions serving DGDs and DGDSAs (discovery: readable by any user)."""
    group = kube.get(f"/apis/{GROUP}", what="discover the nvidia.com API group")
    dgd, dgdsa = [], []
    for entry in (group or {}).get("versions") or []:
        version = entry.get("version", "")
        listing = kube.get(f"/apis/{GROUP}/{version}", what=f"discover {GROUP}/{version}") or {}
        names = {r.get("name") for r in listing.get("resources") or []}
        if DGD in names:
            dgd.append(version)
        if DGDSA in names:
            dgdsa.append(version)
    return sorted(dgd), sorted(dgdsa)


def read_gpus(kube: KubeClient) -> GpuSummary | None:
    """GPU capacity from nodes and bound pods; None when RBAC does not let us read them."""
    try:
        nodes = kube.call("GET", core_path("nodes"), what="list nodes")
        pods = kube.call("GET", core_path("pods"), what="list pods in every namespace")
    except KubeFailure as exc:
        if exc.status in (401, 403):
            return None
        raise
    return gpu_summary(nodes.get("items") or [], pods.get("items") or [])


def probe(cluster) -> ClusterHealth:
    """Reachability, server version, Dynamo CRD versions and GPUs. Raises KubeFailure."""
    with connect(cluster) as kube:
        version = kube.call("GET", "/version", what=f"reach cluster {kube.name}")
        dgd, dgdsa = served_versions(kube)
        return ClusterHealth(str(version.get("gitVersion", "")), dgd, dgdsa, read_gpus(kube))


def put_secret_key(cluster, *, namespace: str, name: str, key: str, value: str) -> bool:
    """Create Secret ``name`` holding ``key`` = ``value``, or set that key in the existing
    Secret (its other keys stay). True when created. The value is never returned, read back
    or logged: responses are not even read (the client logs response bodies at DEBUG)."""
    encoded = base64.b64encode(value.encode()).decode()
    what = f"write Secret {namespace}/{name}"
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": {key: encoded},
              "metadata": {"name": name, "namespace": namespace,
                           "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}}}
    manager = [("fieldManager", FIELD_MANAGER)]
    try:
        with connect(cluster) as kube:
            try:
                kube.call("POST", core_path("secrets", namespace), what=what, query=manager, body=secret,
                          response="none")
                return True
            except KubeFailure as exc:
                if exc.status != 409:
                    raise
            kube.call("PATCH", core_path("secrets", namespace, name), what=what, query=manager,
                      body={"data": {key: encoded}}, content_type=MERGE_PATCH, response="none")
            return False
    except KubeFailure as exc:
        # Belt and braces: no server message should quote the value, but never pass one on that does.
        exc.args = (str(exc).replace(value, "***").replace(encoded, "***"),)
        raise


# ------------------------------------------------------------------------------------ diff


def comparable(obj: dict | None) -> dict | None:
    """The object without what the server keeps changing: status, managedFields, versions."""
    if obj is None:
        return None
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.get("metadata") or {}
    for key in _NOISE_METADATA:
        meta.pop(key, None)
    annotations = meta.get("annotations") or {}
    annotations.pop(_LAST_APPLIED, None)
    if "annotations" in meta and not annotations:
        meta.pop("annotations")
    return out


def live_diff(live: dict | None, after: dict, *, live_label: str, after_label: str) -> str:
    before = dump_yaml(comparable(live)).splitlines(keepends=True) if live else []
    lines = dump_yaml(comparable(after)).splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, lines, fromfile=live_label, tofile=after_label))


# ------------------------------------------------------------------------------------ the runtime


def _dgd_name(deployment, spec) -> str:
    return ((deployment.manifest or {}).get("metadata") or {}).get("name") or spec.name


def _replicas_of(obj: dict, component: str) -> int | None:
    body = obj.get("spec") or {}
    if "services" in body:
        return ((body.get("services") or {}).get(component) or {}).get("replicas")
    entry = next((c for c in body.get("components") or [] if c.get("name") == component), {})
    return entry.get("replicas")


def _set_replicas(obj: dict, component: str, replicas: int) -> None:
    body = obj.get("spec") or {}
    if "services" in body:
        body["services"][component]["replicas"] = replicas
    else:
        next(c for c in body["components"] if c.get("name") == component)["replicas"] = replicas


def _conflicting_managers(failure: KubeFailure) -> set[str]:
    texts = [c.get("message", "") for c in (failure.body.get("details") or {}).get("causes") or []]
    return set(_CONFLICT_WITH.findall("\n".join(texts) or str(failure)))


class KubernetesRuntime:
    kind = "kubernetes"

    def apply(self, *, target: Target, spec, manifest: dict, dry_run: bool = False, deployment,
              revision) -> ApplyResult:
        api_version, name, namespace = manifest["apiVersion"], manifest["metadata"]["name"], target.namespace
        body = copy.deepcopy(manifest)
        body["metadata"]["namespace"] = namespace
        path = custom_path(api_version, DGD, namespace, name)
        what = f"apply DynamoGraphDeployment {namespace}/{name} ({api_version}) on cluster {target.cluster}"
        with connect(target.cluster) as kube:
            live = kube.get(path, what=what)
            held = self._adapter_held(kube, spec, body, live, api_version, namespace)
            query = [("fieldManager", FIELD_MANAGER), ("fieldValidation", "Strict")]
            if dry_run:
                query.append(("dryRun", "All"))
            after = self._server_side_apply(kube, path, body, query, what, api_version)
        diff = live_diff(live, after, live_label=f"live {target.cluster}/{namespace}/{name}",
                         after_label=f"revision {revision.number}" + (" (server dry run)" if dry_run else ""))
        warnings = [f"{component} keeps its live {count} replicas: its scaling adapter owns the count"
                    for component, count in held.items() if count != _replicas_of(manifest, component)]
        if dry_run:
            return ApplyResult(changed=live is None or bool(diff), diff=diff, warnings=warnings)
        changed = live is None or after["metadata"].get("resourceVersion") != live["metadata"].get("resourceVersion")
        deployment.runtime, deployment.cluster, deployment.namespace = self.kind, target.cluster, namespace
        deployment.revision, deployment.manifest, deployment.api_version = revision, body, api_version
        # An apply sets every pool to the revision's replicas, except those an adapter owns.
        deployment.replicas = {c: n for c, n in held.items() if n != _replicas_of(manifest, c)}
        if changed or not deployment.active:
            deployment.generation += 1
            deployment.state = GraphState.PROGRESSING
            deployment.message = f"revision {revision.number} applied; waiting for the Dynamo operator"
        deployment.active = True
        deployment.save()
        return ApplyResult(changed=changed, diff=diff, warnings=warnings)

    def _adapter_held(self, kube: KubeClient, spec, body: dict, live: dict | None, api_version: str,
                      namespace: str) -> dict[str, int]:
        """Pools whose DGDSA exists keep their live replicas in the applied object: the adapter
        owns that count and the operator's webhook refuses any other writer (dynamo-facts §0)."""
        held: dict[str, int] = {}
        if live is None:
            return held
        name = body["metadata"]["name"]
        for service in spec.services:
            count = _replicas_of(live, service.name)
            if not service.scaling_adapter or count is None:
                continue
            adapter = custom_path(api_version, DGDSA, namespace, adapter_name(name, service.name))
            if kube.get(adapter, what=f"read the scaling adapter of {service.name}") is not None:
                _set_replicas(body, service.name, count)
                held[service.name] = count
        return held

    def _server_side_apply(self, kube: KubeClient, path: str, body: dict, query: list, what: str,
                           api_version: str) -> dict:
        try:
            return kube.call("PATCH", path, what=what, query=query, body=body, content_type=APPLY_PATCH)
        except KubeFailure as exc:
            if exc.status == 404:
                raise KubeFailure(f"{exc}. Does cluster {kube.name} serve {api_version} DynamoGraphDeployments "
                                  "(is the Dynamo operator installed), and does the namespace exist?",
                                  status=404) from None
            if exc.status != 409:
                raise
            others = _conflicting_managers(exc) - {FIELD_MANAGER}
            if others or not _conflicting_managers(exc):
                raise KubeFailure(
                    f"{exc}. Another field manager ({', '.join(sorted(others)) or 'unknown'}) owns these fields; "
                    "the control plane never forces a conflict: change them back there, or hand them over, "
                    "then apply again.", status=409, body=exc.body) from None
        # Only our own earlier scale (a patch recorded as an Update by our field manager) holds
        # these fields: taking them back overrides nobody else.
        return kube.call("PATCH", path, what=what, query=[*query, ("force", "true")], body=body,
                         content_type=APPLY_PATCH)

    def scale(self, *, target: Target, spec, service: str, replicas: int, deployment) -> None:
        name, namespace, api_version = _dgd_name(deployment, spec), target.namespace, deployment.api_version
        what = f"scale {service} of {namespace}/{name} to {replicas} on cluster {target.cluster}"
        manager = [("fieldManager", FIELD_MANAGER)]
        with connect(target.cluster) as kube:
            try:
                kube.call("PATCH", custom_path(api_version, DGDSA, namespace, adapter_name(name, service), "scale"),
                          what=what, query=manager, body={"spec": {"replicas": replicas}}, content_type=MERGE_PATCH)
            except KubeFailure as exc:
                if exc.status != 404:  # 404: no adapter for this pool (or no DGDSA CRD): patch the DGD
                    raise
                self._patch_dgd_replicas(kube, api_version, namespace, name, service, replicas, what)
        overrides = dict(deployment.replicas or {})
        overrides[service] = replicas
        deployment.replicas = overrides
        deployment.generation += 1
        deployment.save(update_fields=["replicas", "generation"])

    def _patch_dgd_replicas(self, kube: KubeClient, api_version: str, namespace: str, name: str, service: str,
                            replicas: int, what: str) -> None:
        path = custom_path(api_version, DGD, namespace, name)
        manager = [("fieldManager", FIELD_MANAGER)]
        if api_version == V1ALPHA1:
            kube.call("PATCH", path, what=what, query=manager, content_type=MERGE_PATCH,
                      body={"spec": {"services": {service: {"replicas": replicas}}}})
            return
        for attempt in (1, 2):
            live = kube.get(path, what=what)
            if live is None:
                raise KubeFailure(f"{what}: DynamoGraphDeployment {namespace}/{name} is not on the cluster; "
                                  "apply it first", status=404)
            components = (live.get("spec") or {}).get("components") or []
            index = next((i for i, c in enumerate(components) if c.get("name") == service), None)
            if index is None:
                raise KubeFailure(f"{what}: the live DynamoGraphDeployment has no component {service!r}")
            # The test op pins the index to the name: if the list changed since the read, the
            # server refuses (422) instead of scaling another pool.
            op = "replace" if "replicas" in components[index] else "add"
            patch = [{"op": "test", "path": f"/spec/components/{index}/name", "value": service},
                     {"op": op, "path": f"/spec/components/{index}/replicas", "value": replicas}]
            try:
                kube.call("PATCH", path, what=what, query=manager, body=patch, content_type=JSON_PATCH)
                return
            except KubeFailure as exc:
                if exc.status != 422 or attempt == 2:
                    raise

    def delete(self, *, target: Target, spec, deployment) -> None:
        name, namespace = _dgd_name(deployment, spec), target.namespace
        what = f"delete DynamoGraphDeployment {namespace}/{name} on cluster {target.cluster}"
        with connect(target.cluster) as kube:
            try:
                kube.call("DELETE", custom_path(deployment.api_version, DGD, namespace, name), what=what)
            except KubeFailure as exc:
                if exc.status != 404:  # already gone is what we wanted
                    raise
        deployment.active = False
        deployment.generation += 1
        deployment.state = GraphState.DELETING
        deployment.message = "delete requested: the Dynamo operator removes the pods"
        deployment.save(update_fields=["active", "generation", "state", "message"])

    def pod_log(self, *, deployment, pod: str, lines: int = 200) -> str:
        return read_log(deployment.cluster, deployment.namespace, pod, lines=lines)


def read_log(cluster, namespace: str, pod: str, *, lines: int = 200, previous: bool = False) -> str:
    """The last lines of a pod's main container (the operator names it ``main``)."""
    path = core_path("pods", namespace, pod, "log")
    query = [("tailLines", str(lines))] + ([("previous", "true")] if previous else [])
    what = f"read the log of pod {namespace}/{pod}"
    with connect(cluster) as kube:
        try:
            return kube.call("GET", path, what=what, query=[*query, ("container", "main")], response="text")
        except KubeFailure as exc:
            if exc.status != 400:  # 400: no container named main; the pod's only container then
                raise
            return kube.call("GET", path, what=what, query=query, response="text")
