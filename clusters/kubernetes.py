"""The one module that imports the official kubernetes client: the adapter between the
control plane and a cluster's API server. The clusters app (registration, health) and the
graphs' Kubernetes runtime and watchers (graphs/runtimes/kubernetes/) use it and never the
client itself.

Everything the control plane does to or reads from a cluster goes through ``KubeClient``:
objects travel as plain dicts (``response_type="object"``: no client-side model validation,
which rejects a whole list for one odd object), and every failure becomes a ``KubeFailure``
(a RuntimeFailure) carrying the API server's own message.

Client pitfalls handled here:
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
import json
import logging
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

from core.errors import RuntimeFailure

from .gpus import GpuSummary, gpu_summary
from .models import Cluster
from .resources import core_path

log = logging.getLogger(__name__)

FIELD_MANAGER = "dynamo-control-plane"
DGD = "dynamographdeployments"
DGDSA = "dynamographdeploymentscalingadapters"
GROUP = "nvidia.com"
APPLY_PATCH = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


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


class UnusableSettings(KubeFailure):
    """The cluster's stored connection settings cannot be loaded (a broken kubeconfig, a context
    it does not have): the registration must be fixed, no call was made."""


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
        raise UnusableSettings(f"cannot load the connection settings of cluster {cluster.name} "
                               f"({cluster.connection_label}): {exc}") from None
    # urllib3 would otherwise retry dropped connections and 429/503 invisibly (Retry(total=3)).
    configuration.retries = False
    # The watchers hold three streams per namespace open on one client.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 32)
    return configuration


def connect(cluster) -> KubeClient:
    """A client for a registered cluster (a clusters.models.Cluster or its name)."""
    if isinstance(cluster, str):
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
        "json" (parsed), "text", or "none" (the body is dropped unparsed and never logged:
        the client logs parsed bodies at DEBUG, and a Secret's answer holds its data)."""
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
            if response == "text":
                return result.data.decode(errors="replace")
            result.drain_conn()  # read and dropped unseen: a pooled connection must not keep a body
            return None
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
    """GPU capacity from nodes, and what is free from the pods bound to them. None when RBAC
    does not let us read nodes; ``free`` is None when it lets us read nodes but not every
    namespace's pods (the default, least-privilege install: deploy/kustomize)."""
    nodes = read_nodes(kube)
    return None if nodes is None else gpus_of(kube, nodes)


def read_nodes(kube: KubeClient) -> list[dict] | None:
    """The cluster's nodes (one small list: the watchers' first call of a cycle); None when RBAC
    does not let us read them."""
    try:
        return kube.call("GET", core_path("nodes"), what="list nodes").get("items") or []
    except KubeFailure as exc:
        if exc.status in (401, 403):
            return None
        raise


def gpus_of(kube: KubeClient, nodes: list[dict]) -> GpuSummary:
    """The GPUs of ``nodes``, free ones counted from every namespace's pods (where RBAC allows)."""
    try:
        pods = kube.call("GET", core_path("pods"), what="list pods in every namespace").get("items") or []
    except KubeFailure as exc:
        if exc.status not in (401, 403):
            raise
        pods = None
    return gpu_summary(nodes, pods)


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


def read_log(kube: KubeClient, namespace: str, pod: str, *, lines: int = 200, previous: bool = False) -> str:
    """The last lines of a pod's main container (the operator names it ``main``); with
    ``previous``, of the instance that last exited (what a crash loop printed)."""
    path = core_path("pods", namespace, pod, "log")
    query = [("tailLines", str(lines))] + ([("previous", "true")] if previous else [])
    what = f"read the log of pod {namespace}/{pod}"
    try:
        return kube.call("GET", path, what=what, query=[*query, ("container", "main")], response="text")
    except KubeFailure as exc:
        if exc.status != 400:  # 400: no container named main; the pod's only container then
            raise
        return kube.call("GET", path, what=what, query=query, response="text")


def read_log_head(kube: KubeClient, namespace: str, pod: str, limit_bytes: int) -> str:
    """The first ``limit_bytes`` of the main container's log (``limitBytes`` counts from the
    start): what an engine prints once at start-up, such as its KV-transfer backend."""
    path = core_path("pods", namespace, pod, "log")
    what = f"read the log of pod {namespace}/{pod}"
    query = [("limitBytes", str(limit_bytes))]
    try:
        return kube.call("GET", path, what=what, query=[*query, ("container", "main")], response="text")
    except KubeFailure as exc:
        if exc.status != 400:
            raise
        return kube.call("GET", path, what=what, query=query, response="text")


def exec_shm_bytes(kube: KubeClient, namespace: str, pod: str) -> int:
    """The size of /dev/shm as the main container sees it, from ``df -kP /dev/shm`` run
    through ``pods/exec`` (a WebSocket; the RBAC verb is ``create`` on ``pods/exec``). Raises
    KubeFailure: 403 when exec is not allowed, or when the container has no ``df``."""
    from kubernetes.stream import stream

    what = f"run df in pod {namespace}/{pod}"
    # A client of its own: stream() swaps its ApiClient's request function while it runs, and
    # the watchers share this one.
    core = k8s.CoreV1Api(k8s.ApiClient(kube.api.configuration))
    try:
        ws = stream(core.connect_get_namespaced_pod_exec, pod, namespace, command=["df", "-kP", "/dev/shm"],
                    container="main", stdin=False, stdout=True, stderr=True, tty=False, _preload_content=False)
        try:
            ws.run_forever(timeout=kube.timeout[1])
            out, err, code = ws.read_stdout(), ws.read_stderr(), ws.returncode
        finally:
            ws.close()
    except ApiException as exc:
        # A refused upgrade comes back as status 0 with the handshake's status line in the reason.
        reason = str(exc.reason or exc)
        status = 403 if "403" in reason else 404 if "404" in reason else exc.status or 0
        raise KubeFailure(f"{what}: {'pods/exec is not allowed' if status == 403 else reason[:200]}",
                          status=status) from exc
    except Exception as exc:  # the websocket's own errors
        raise KubeFailure(f"{what}: {exc.__class__.__name__}: {exc}", status=0) from exc
    lines = (out or "").strip().splitlines()
    try:
        return int(lines[-1].split()[1]) * 1024  # POSIX df -k: 1024-byte blocks, second column
    except (IndexError, ValueError):
        raise KubeFailure(f"{what}: exit code {code}: {(err or out or '').strip()[:200]}", status=200) from None
