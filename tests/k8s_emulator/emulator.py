"""``KubeEmulator``: lifecycle, client helpers, test hooks and seeding helpers."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .api import Api
from .conversion import BUILTIN_CONVERTERS, Converter
from .errors import ApiError
from .fixtures import build_event, build_node, build_pod
from .operator import FakeOperator
from .patches import clone
from .request import Request
from .resources import Registry, Resource
from .schema import default_crds, load_crd_file
from .server import EmulatorHTTPServer, Fault, RecordedRequest
from .store import Store
from .writes import now

CrdSource = dict[str, Any] | str | Path
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
DEFAULT_USER = "kubernetes-admin"  # who an unauthenticated request (or the emulator's token) is


class KubeEmulator:
    """An in-process Kubernetes API server for tests (see the package docstring)."""

    def __init__(self, *, crds: list[CrdSource] | None = None, token: str | None = None,
                 namespaces: tuple[str, ...] | list[str] = DEFAULT_NAMESPACES, auto_create_namespaces: bool = False,
                 simulate_operator: bool = False, history_limit: int = 10_000, watch_timeout: float = 1800.0):
        self.token = token
        self.users: dict[str, str] = {}  # bearer token -> username (add_user)
        self.auto_create_namespaces = auto_create_namespaces
        self.simulate_operator = simulate_operator
        self.watch_timeout = watch_timeout
        self.bookmark_interval = 60.0
        self.store = Store(history_limit)
        self.registry = Registry()
        self.converters: dict[tuple[str, str], Converter] = dict(BUILTIN_CONVERTERS)
        self.operator = FakeOperator(self)
        self.admission_hooks: list[Callable[[Request, dict[str, Any] | None, dict[str, Any]], None]] = [
            self.operator.admission]
        self.pod_logs: dict[tuple[str | None, str | None, str | None], str] = {}
        # (namespace, pod) -> fn(command) -> (stdout, stderr, exit code), for pods/exec
        self.pod_exec: dict[tuple[str, str], Callable[[list[str]], tuple[str, str, int]]] = {}
        self.errors: list[str] = []
        self.api = Api(self)
        self._faults: list[Fault] = []
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._server: EmulatorHTTPServer | None = None
        self._thread: threading.Thread | None = None
        for crd in default_crds() if crds is None else crds:
            self.install_crd(crd)
        for namespace in namespaces:
            self.add_namespace(namespace)

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> KubeEmulator:
        if self._server is None:
            self._server = EmulatorHTTPServer(self)
            self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="kube-emulator",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self.operator.stop()
        self.store.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> KubeEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("KubeEmulator is not started")
        return f"http://127.0.0.1:{self._server.server_port}"

    # -- clients ------------------------------------------------------------------------------------
    def configuration(self, *, retries: bool | int | None = False, token: str | None = None) -> Any:
        """A ``kubernetes.client.Configuration`` for this server. ``retries=False`` (default) turns off
        urllib3's hidden retries so injected faults are seen; pass ``None`` for the client default."""
        from kubernetes import client

        config = client.Configuration(host=self.url)
        config.retries = retries
        bearer = token if token is not None else self.token
        if bearer:
            config.api_key = {"authorization": bearer}
            config.api_key_prefix = {"authorization": "Bearer"}
        return config

    def add_user(self, token: str, username: str) -> None:
        """Accept bearer ``token`` as ``username`` (e.g. ``system:serviceaccount:llm:planner-serviceaccount``)."""
        self.users[token] = username

    def authenticate(self, authorization: str) -> str:
        """The username of a request (401 for a wrong token when one is required)."""
        bearer = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else ""
        if bearer in self.users:
            return self.users[bearer]
        if self.token and bearer != self.token:
            raise ApiError(401)
        return DEFAULT_USER

    def api_client(self, **kwargs: Any) -> Any:
        """A real ``kubernetes.client.ApiClient`` talking to this emulator."""
        from kubernetes import client

        return client.ApiClient(self.configuration(**kwargs))

    def write_kubeconfig(self, path: str | Path, namespace: str = "default", context: str = "emulator") -> Path:
        """Write a kubeconfig for ``kubernetes.config.load_kube_config(config_file=path)``."""
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": context,
               "clusters": [{"name": context, "cluster": {"server": self.url}}],
               "users": [{"name": context, "user": user}],
               "contexts": [{"name": context, "context": {"cluster": context, "user": context,
                                                           "namespace": namespace}}]}
        Path(path).write_text(yaml.safe_dump(doc))
        return Path(path)

    # -- request log and faults ---------------------------------------------------------------------
    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def find_requests(self, method: str | None = None, path: str | None = None) -> list[RecordedRequest]:
        """Recorded requests with this method and whose path matches the regex ``path``."""
        return [r for r in self.requests
                if (method is None or r.method == method.upper()) and (path is None or re.search(path, r.path))]

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def inject(self, method: str, path_regex: str, status: int | None = None, times: int | None = 1,
               retry_after: int | None = None, delay: float | None = None, body: dict[str, Any] | None = None,
               drop: bool = False) -> Fault:
        """Fail the next ``times`` requests (None: all) whose method matches (``"*"``: any) and whose
        path matches ``path_regex``: answer ``status`` with a Status body (and ``Retry-After``), after
        sleeping ``delay`` seconds. ``status=None`` with ``delay`` only slows the request down;
        ``drop=True`` closes the connection without an answer."""
        fault = Fault(method.upper(), re.compile(path_regex), status, times, retry_after, delay, body, drop)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            faults = list(self._faults)
        return next((f for f in faults if f.take(method, path)), None)

    def expire_history(self) -> int:
        """Compact the watch history: resuming a watch (or a list ``continue``) from any earlier
        resourceVersion now gets 410 Gone. Returns the current resourceVersion."""
        return self.store.expire_history()

    def end_watches(self) -> None:
        """Close every open watch stream now (clients see a normal end of stream and reconnect)."""
        self.store.end_watches()

    def next_audit_id(self) -> str:
        return str(uuid.uuid4())

    # -- CRDs ---------------------------------------------------------------------------------------
    def install_crd(self, crd: CrdSource, versions: list[str] | None = None) -> dict[str, Any]:
        """Install a CRD (dict or YAML path), optionally serving only some of its ``versions``."""
        doc = load_crd_file(str(crd)) if isinstance(crd, str | Path) else crd
        spec = dict(doc["spec"])
        if versions is not None:
            spec["versions"] = [v for v in spec["versions"] if v["name"] in versions]
            if spec["versions"] and not any(v.get("storage") for v in spec["versions"]):
                spec["versions"] = [{**spec["versions"][0], "storage": True}, *spec["versions"][1:]]
        names = spec["names"]
        obj = {**doc, "spec": spec, "metadata": {**doc["metadata"]},
               "status": {"acceptedNames": {k: names[k] for k in ("kind", "listKind", "plural", "singular")
                                            if k in names},
                          "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
                          "conditions": [{"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                                          "message": "the initial names have been accepted",
                                          "lastTransitionTime": now()}]}}
        return self.put(obj)

    def remove_crd(self, name: str) -> None:
        """Uninstall a CRD (and its objects), e.g. to test a cluster without the DGDSA CRD."""
        obj = self.store.get(("apiextensions.k8s.io", "customresourcedefinitions"), None, name)
        if obj is not None:
            self.api.remove(self.resolve("customresourcedefinitions"), obj)

    def _rebuild_registry(self) -> None:
        self.registry.rebuild(self.store.list(("apiextensions.k8s.io", "customresourcedefinitions")))

    def after_write(self, res: Resource, stored: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
        if res.plural == "customresourcedefinitions":
            self._rebuild_registry()
        if self.simulate_operator:
            self.operator.on_change(res.key, stored, old)

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until the fake operator has converged (a no-op without it)."""
        if self.simulate_operator:
            self.operator.settle(timeout)

    # -- direct store access ------------------------------------------------------------------------
    def resolve(self, resource: str) -> Resource:
        """A resource by plural, singular, kind or short name (``"dgd"``, ``"pods"``, ``"Pod"``)."""
        want = resource.lower()
        for res in self.registry.by_key.values():
            if want in (res.plural, res.singular, res.kind.lower(), *res.short_names):
                return res
        raise KeyError(resource)

    def get(self, resource: str, name: str, namespace: str | None = "default",
            version: str | None = None) -> dict[str, Any] | None:
        """The stored object (in ``version`` if given), bypassing HTTP."""
        res = self.resolve(resource)
        obj = self.store.get(res.key, res.scoped(namespace), name)
        return self.api.view(res, obj, version) if version and obj else obj

    def list_objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        res = self.resolve(resource)
        return self.store.list(res.key, res.scoped(namespace))

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or overwrite an object without validation, keeping its ``status`` (for seeding);
        it emits the watch event a real write would."""
        group, _, _version = obj["apiVersion"].rpartition("/")
        res = next((r for r in self.registry.by_key.values() if r.group == group and r.kind == obj["kind"]), None)
        if res is None:
            raise KeyError(f"{obj['apiVersion']} {obj['kind']} is not served")
        with self.store.cond:  # serialised with HTTP writes (and the fake operator they trigger)
            return self._put(res, {**obj, "metadata": clone(obj.get("metadata") or {})})

    def _put(self, res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        if res.namespaced:
            meta["namespace"] = meta.get("namespace") or "default"
            if res.plural != "namespaces" and self.store.get(("", "namespaces"), None, meta["namespace"]) is None:
                self.add_namespace(meta["namespace"])
        old = self.store.get(res.key, meta.get("namespace") if res.namespaced else None, meta["name"])
        if old is not None:
            for key in ("uid", "creationTimestamp", "generation"):
                if key in old["metadata"]:
                    meta.setdefault(key, old["metadata"][key])
            if res.custom and old.get("spec") != obj.get("spec"):
                meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        else:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now())
            if res.custom:
                meta.setdefault("generation", 1)
        stored = self.store.commit(res.key, obj, "MODIFIED" if old is not None else "ADDED")
        self.after_write(res, stored, old)
        return stored

    def internal_write(self, key: tuple[str, str], version: str, body: dict[str, Any], sub: str | None = None,
                       manager: str = "emulator", user: str = DEFAULT_USER) -> dict[str, Any]:
        """Write through the full pipeline (validation, generation, managedFields, hooks) as ``manager``."""
        res = self.registry.by_group_resource(*key)
        if res is None:
            raise KeyError(key)
        meta = body["metadata"]
        namespace = meta.get("namespace") if res.namespaced else None
        req = Request("PUT", res, version, namespace, meta["name"], sub, {"fieldManager": manager},
                      user_agent=manager, user=user)
        with self.store.cond:
            return self.api.write(req, self.store.get(key, namespace, meta["name"]), body)

    def set_status(self, resource: str, name: str, status: dict[str, Any], namespace: str | None = "default",
                   manager: str = "emulator") -> dict[str, Any]:
        """Replace ``.status`` as a controller would (validated; in the object's stored version)."""
        res = self.resolve(resource)
        obj = self.store.get(res.key, res.scoped(namespace), name)
        if obj is None:
            raise ApiError(404, f"{res.plural} {name!r} not found")
        version = obj["apiVersion"].rpartition("/")[2]
        return self.internal_write(res.key, version, {**obj, "status": status}, sub="status", manager=manager)

    def delete_object(self, resource: str, name: str, namespace: str | None = "default") -> None:
        res = self.resolve(resource)
        with self.store.cond:
            obj = self.store.get(res.key, res.scoped(namespace), name)
            if obj is not None:
                self.api.remove(res, obj)

    # -- seeding helpers ----------------------------------------------------------------------------
    def add_namespace(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        return self.put({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}},
                         "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})

    def set_pod(self, name: str, namespace: str = "default", **kwargs: Any) -> dict[str, Any]:
        """Create or replace a pod; keyword arguments as :func:`fixtures.build_pod` (``dgd=``,
        ``component=``, ``component_type=``, ``ready=``, ``waiting_reason=``, ``unschedulable=``...)."""
        return self.put(build_pod(name, namespace, **kwargs))

    def add_event(self, involved: dict[str, Any], reason: str, message: str, **kwargs: Any) -> dict[str, Any]:
        """Add an Event about ``involved`` (a stored object or ``{"kind", "name", "namespace"}``)."""
        return self.put(build_event(involved, reason, message, **kwargs))

    def add_node(self, name: str, **kwargs: Any) -> dict[str, Any]:
        """Add a Node; ``gpus=N`` sets ``nvidia.com/gpu`` capacity and allocatable."""
        return self.put(build_node(name, **kwargs))

    def add_secret(self, name: str, namespace: str = "default", data: dict[str, str] | None = None,
                   type: str = "Opaque") -> dict[str, Any]:
        import base64

        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in (data or {}).items()}
        return self.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                         "type": type, "data": encoded})

    def set_pod_log(self, name: str, text: str, namespace: str = "default", container: str | None = None) -> None:
        """What ``GET .../pods/<name>/log`` returns (per container, or for any container)."""
        self.pod_logs[(namespace, name, container)] = text

    def set_pod_exec(self, name: str, handler: Callable[[list[str]], tuple[str, str, int]],
                     namespace: str = "default") -> None:
        """What ``pods/<name>/exec`` runs: ``handler(command)`` gives (stdout, stderr, exit code)."""
        self.pod_exec[(namespace, name)] = handler
