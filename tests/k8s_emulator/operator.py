"""A tiny fake Dynamo operator (opt-in: ``emulator.simulate_operator = True``).

Runs in its own loop (a thread), as a controller does: a write that concerns a DGD queues a
reconcile and returns at once; the operator then acts, and the pods it starts are Pending
(``ContainerCreating``) until the kubelet's part makes them Running and Ready ``ready_delay``
seconds later, after which the DGD status converges. ``settle()`` waits until all of that is done:
* a DGDSA ``<dgd>-<lower(component)>`` for each component with a scaling adapter (v1alpha1
* a DGDSA ``<dgd>-<lower(component)>`` for each component with a scaling adapter (v1alpha1
  ``scalingAdapter.enabled: true``, v1beta1 ``scalingAdapter: {}``); DGDSAs of components that
  dropped it are deleted; the DGDSA's ``spec.replicas`` is the source of truth and is copied into
  the DGD (as the operator, which the adapter webhook allows);
* one pod per replica with the operator's labels, owned by the DGD (cascade delete), named like
  the component pathway (``<dgd>-<lower(comp)>-<hash>-<rand>``); extra pods deleted on scale-down,
  a deleted pod is recreated; a changed pod template rolls the pool as Grove does, with
  ``rolling = {"maxUnavailable": 1, "maxSurge": 0}`` by default, and the DGD counts every ready pod,
  of either template, as the operator's status does (ai-dynamo/dynamo#3567);
* DGD status: ``state``, a ``Ready`` condition (reasons ``all_resources_are_ready``,
  ``pods_not_ready``, ``insufficient_capacity``), ``observedGeneration`` and per-component replica
  counts (``status.services`` in v1alpha1, ``status.components`` in v1beta1);
* the validating webhook on DGD creates and updates (``webhook.py``: every rule of upstream's, 422 as
  current releases answer or ``webhook_status = 403`` as older);
* pods as the operator renders them: the ``shared-memory`` emptyDir (medium Memory) mounted at
  ``/dev/shm``, 8Gi when ``sharedMemorySize`` is unset and none when it is ``"0"``
  (``internal/dynamo/shared_memory.go``, ``internal/consts/consts.go``); one Service per component
  named ``NormalizeKubeResourceName(<dgd>-<lower(component)>)`` (lower case, dots to ``-``;
  ``internal/dynamo/graph.go``), port 8000 ``http`` for a frontend, 9090 ``system`` otherwise;
* a failing reconcile (``fail_reconcile[dgd] = "error text"``), as the controller's deferred
  status update does it (``internal/controller/dynamographdeployment_controller.go``):
  ``state: failed``, ``Ready=False`` reason ``failed_to_reconcile_the_resources`` with the error as
  its message, and ``observedGeneration`` left where it was.

``pod_overrides[component] = {...}`` passes extra :func:`build_pod` arguments (e.g.
``{"waiting_reason": "ImagePullBackOff"}`` or ``{"unschedulable": True}``) to its pods, which then
stay in that state.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import deque
from typing import Any

from core.dgd.webhook import Cluster

from . import webhook
from .dgdr import DgdrController
from .fixtures import COMPONENT_LABEL, DGD_LABEL, build_pod, now

DGD = ("nvidia.com", "dynamographdeployments")
DGDSA = ("nvidia.com", "dynamographdeploymentscalingadapters")
POD = ("", "pods")
SERVICE = ("", "services")
MANAGER = "dynamo-operator"
SHM_VOLUME = "shared-memory"
SHM_DEFAULT = "8Gi"
FAILED_REASON = "failed_to_reconcile_the_resources"


class FakeOperator:
    def __init__(self, emu: Any):
        self.emu = emu
        self.pod_overrides: dict[str, dict[str, Any]] = {}
        self.enforce_adapter_webhook = True  # the validating webhook, creates and updates (webhook.py)
        self.webhook_status = 422  # 403 for releases before the v1beta1 webhooks
        # What the webhook learns from the operator's configuration and the cluster (core.dgd.webhook.Cluster).
        self.webhook_cluster = Cluster()
        self.fail_reconcile: dict[str, str] = {}  # DGD name -> the error its reconcile returns
        self.ready_delay = 0.1  # seconds from a pod's creation to its readiness
        # Seconds from a worker pod's readiness to the frontend routing to it (frontend.py): the
        # frontend admits a worker when its discovery record arrives, after readiness (#13622).
        self.admit_delay = 0.0
        self.ready_at: dict[tuple[str, str], float] = {}  # pod -> when it turned Ready (unix seconds)
        # An operator whose status runs ahead of the pods: readyReplicas says the count asked
        # for whatever the pods are (a status that counts old or unready pods, #3567).
        self.status_ahead = False
        # How a pool replaces pods of an earlier template: Grove's PodClique default.
        self.rolling = {"maxUnavailable": 1, "maxSurge": 0}
        # Seconds between two replacements of one pool (Grove moves on at a later reconcile): the
        # DGD meanwhile counts the ready pods of both templates and says Ready (#3567).
        self.roll_delay = 0.0
        self._roll_after: dict[tuple[str, str, str], float] = {}  # pool -> no replacement before
        self._requeue_at: dict[tuple[str, str], float] = {}  # DGD -> reconcile again at
        self.queue: deque[tuple[str, str]] = deque()
        self.busy = False
        self._starting: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}  # pod -> (ready at, build args)
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.dgdr = DgdrController(emu)  # reacts only where the DGDR CRD is served

    # -- triggers ---------------------------------------------------------------------------------
    def on_change(self, key: tuple[str, str], obj: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
        self.dgdr.on_change(key, obj, old)
        current = obj or old or {}
        meta = current.get("metadata") or {}
        if key == DGD:
            self.enqueue(meta.get("namespace", ""), meta["name"])
        elif key == DGDSA:
            ref = ((current.get("spec") or {}).get("dgdRef") or {}).get("name")
            if ref:
                self.enqueue(meta.get("namespace", ""), ref)
        elif key == POD and (meta.get("labels") or {}).get(DGD_LABEL):
            self.enqueue(meta.get("namespace", ""), meta["labels"][DGD_LABEL])

    def enqueue(self, namespace: str, name: str) -> None:
        """Queue a reconcile for the operator's own loop: a write returns before the operator
        acts, as with a real controller watching the API server."""
        with self.emu.store.cond:
            if (namespace, name) not in self.queue:
                self.queue.append((namespace, name))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="fake-dynamo-operator", daemon=True)
                self._thread.start()
            self.emu.store.cond.notify_all()

    def _loop(self) -> None:
        cond = self.emu.store.cond
        with cond:
            while not self._stopped:
                self._promote_started_pods()
                if self.queue:
                    self.busy = True
                    try:
                        self.reconcile(*self.queue.popleft())
                    except Exception as exc:  # a bug in the fake operator: fail the test that owns it
                        self.emu.errors.append(f"fake operator: {exc!r}")
                    finally:
                        self.busy = False
                    cond.notify_all()
                    continue
                clock = time.monotonic()
                for key, at in list(self._requeue_at.items()):
                    if at <= clock:
                        del self._requeue_at[key]
                        self.queue.append(key)
                if self.queue:
                    continue
                due = min([at for at, _ in self._starting.values()] + list(self._requeue_at.values()), default=None)
                cond.wait(0.5 if due is None else max(due - time.monotonic(), 0.001))

    def stop(self) -> None:
        with self.emu.store.cond:
            self._stopped = True
            self.emu.store.cond.notify_all()

    def settle(self, timeout: float = 10.0, *, pods: bool = True) -> None:
        """Wait until the operator has nothing left to do: its queue is empty and (``pods``) every
        pod it started is Ready (or held in the state ``pod_overrides`` gives it)."""
        deadline = time.monotonic() + timeout
        with self.emu.store.cond:
            while self.queue or self.busy or (pods and (self._starting or self._requeue_at)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the fake operator did not settle in {timeout}s: queue {list(self.queue)}, "
                                       f"{len(self._starting)} pods starting")
                self.emu.store.cond.wait(min(left, 0.05))

    def start_pods_now(self) -> None:
        """Make every starting pod due now (for a test that held them with a long ``ready_delay``)."""
        with self.emu.store.cond:
            self._starting = {pod: (0.0, kwargs) for pod, (_at, kwargs) in self._starting.items()}
            self.emu.store.cond.notify_all()

    def _promote_started_pods(self) -> None:
        """The kubelet's part: a pod started by the operator becomes Running and Ready once its
        delay has passed."""
        clock = time.monotonic()
        for (namespace, name), (at, kwargs) in list(self._starting.items()):
            if at > clock:
                continue
            del self._starting[(namespace, name)]
            pod = self.emu.store.get(POD, namespace, name)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                continue
            ready = build_pod(name, namespace, **kwargs)
            self.ready_at[(namespace, name)] = time.time()
            self.emu.put({**pod, "status": ready["status"], "spec": {**pod["spec"], **{
                k: v for k, v in ready["spec"].items() if k == "nodeName"}}})

    # -- webhook ----------------------------------------------------------------------------------
    def admission(self, req: Any, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        """The operator's validating webhook on a DGD create or update (not status writes, not an
        object being deleted), on the v1beta1 views; a v1alpha1 request also hands it the v1alpha1 ones."""
        if (not self.emu.simulate_operator or not self.enforce_adapter_webhook or req.res.key != DGD
                or req.sub == "status" or (old is not None and new["metadata"].get("deletionTimestamp"))):
            return
        res = self.emu.registry.by_group_resource(*DGD)
        views = {"new": self.emu.api.view(res, new, "v1beta1"),
                 "old": self.emu.api.view(res, old, "v1beta1") if old is not None else None}
        if req.version == "v1alpha1":
            views.update(new_alpha=new, old_alpha=old)
        errors = webhook.errors(views, source=f"nvidia.com/{req.version}", username=req.user,
                                cluster=self.webhook_cluster)
        if errors:
            raise webhook.denial(new["metadata"]["name"], errors, self.webhook_status)

    # -- reconcile --------------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> None:
        emu = self.emu
        dgd = emu.store.get(DGD, namespace, name)
        if dgd is None or dgd["metadata"].get("deletionTimestamp"):
            return
        version = dgd["apiVersion"].split("/")[1]
        if name in self.fail_reconcile:
            self._write_failure(dgd, self.fail_reconcile[name])
            return
        beta = emu.api.view(emu.registry.by_group_resource(*DGD), dgd, "v1beta1")
        owner = {"apiVersion": dgd["apiVersion"], "kind": dgd["kind"], "name": name,
                 "uid": dgd["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        components = (beta.get("spec") or {}).get("components") or []
        wanted: dict[str, int] = {}
        for comp in components:
            cname = comp["name"]
            replicas = int(comp.get("replicas", 1))
            adapter_name = f"{name}-{cname.lower()}"
            adapter = emu.store.get(DGDSA, namespace, adapter_name)
            if "scalingAdapter" in comp:
                if adapter is None:  # a write as the operator's, so its managedFields name it
                    emu.internal_write(DGDSA, "v1beta1", {
                        "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeploymentScalingAdapter",
                        "metadata": {"name": adapter_name, "namespace": namespace, "ownerReferences": [owner],
                                     "labels": {DGD_LABEL: name}},
                        "spec": {"dgdRef": {"name": name, "componentName": cname}, "replicas": replicas}},
                        manager=MANAGER, user=webhook.OPERATOR_PRINCIPAL)
                else:
                    desired = (adapter.get("spec") or {}).get("replicas", replicas)
                    if desired != replicas:
                        self._set_dgd_replicas(dgd, version, cname, desired)
                        return  # the DGD write re-queues this DGD
                selector = f"{DGD_LABEL}={name},{COMPONENT_LABEL}={cname}"
                current = emu.store.get(DGDSA, namespace, adapter_name)
                status = dict(current.get("status") or {})
                if status.get("replicas") != replicas or status.get("selector") != selector:
                    status.update(replicas=replicas, selector=selector, lastScaleTime=now())
                    emu.set_status("dgdsa", adapter_name, status, namespace=namespace, manager=MANAGER)
            elif adapter is not None:
                emu.api.remove(emu.registry.by_group_resource(*DGDSA), adapter)
            wanted[cname] = replicas
            self._scale_pods(namespace, name, comp, replicas, owner)
            self._service(namespace, name, comp, owner)
        for pod in emu.store.list(POD, namespace):
            labels = pod["metadata"].get("labels") or {}
            if labels.get(DGD_LABEL) == name and labels.get(COMPONENT_LABEL) not in wanted:
                emu.api.remove(emu.registry.by_group_resource(*POD), pod)
        for svc in emu.store.list(SERVICE, namespace):
            labels = svc["metadata"].get("labels") or {}
            if labels.get(DGD_LABEL) == name and labels.get(COMPONENT_LABEL) not in wanted:
                emu.api.remove(emu.registry.by_group_resource(*SERVICE), svc)
        self._write_status(dgd, version, components, wanted)

    def _write_failure(self, dgd: dict[str, Any], error: str) -> None:
        """The controller's deferred status write after ``Reconcile`` returned an error."""
        meta, status = dgd["metadata"], dict(dgd.get("status") or {})
        cond = {"type": "Ready", "status": "False", "reason": FAILED_REASON, "message": error,
                "lastTransitionTime": now()}
        status.update(state="failed", conditions=[cond])  # observedGeneration stays: not advanced on error
        self.emu.set_status("dgd", meta["name"], status, namespace=meta.get("namespace"), manager=MANAGER)

    def _service(self, namespace: str, name: str, comp: dict[str, Any], owner: dict[str, Any]) -> None:
        cname = comp["name"]
        svc_name = normalize_kube_resource_name(f"{name}-{cname.lower()}")
        if self.emu.store.get(SERVICE, namespace, svc_name) is not None:
            return
        port = ({"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}
                if comp.get("type") == "frontend" else
                {"name": "system", "port": 9090, "targetPort": "system", "protocol": "TCP"})
        self.emu.put({"apiVersion": "v1", "kind": "Service",
                      "metadata": {"name": svc_name, "namespace": namespace, "ownerReferences": [owner],
                                   "labels": {DGD_LABEL: name, COMPONENT_LABEL: cname}},
                      "spec": {"type": "ClusterIP", "ports": [port],
                               "selector": {DGD_LABEL: name, COMPONENT_LABEL: cname}}})

    def _set_dgd_replicas(self, dgd: dict[str, Any], version: str, component: str, replicas: int) -> None:
        body = self.emu.api.view(self.emu.registry.by_group_resource(*DGD), dgd, version)
        body = {**body, "spec": dict(body["spec"])}
        if version == "v1alpha1":
            services = dict(body["spec"]["services"])
            services[component] = {**services[component], "replicas": replicas}
            body["spec"]["services"] = services
        else:
            body["spec"]["components"] = [{**c, "replicas": replicas} if c["name"] == component else c
                                          for c in body["spec"]["components"]]
        self.emu.internal_write(DGD, version, body, manager=MANAGER, user=webhook.OPERATOR_PRINCIPAL)

    def _scale_pods(self, namespace: str, name: str, comp: dict[str, Any], replicas: int,
                    owner: dict[str, Any]) -> None:
        """The pool's pods, rolled as Grove rolls a PodClique: pods of an earlier pod template go
        while no more than ``rolling["maxUnavailable"]`` of ``replicas`` are unready, new ones come
        within ``rolling["maxSurge"]`` extra pods (Grove's default: 1 and 0). Readiness is the
        pod's own; the frontend routes to a ready worker ``admit_delay`` later (frontend.py, #13622)."""
        emu, cname = self.emu, comp["name"]
        template_hash = hashlib.sha1(repr(comp.get("podTemplate")).encode(), usedforsecurity=False).hexdigest()[:10]
        prefix = f"{name}-{cname.lower()}-{template_hash}-"
        pods = sorted((p for p in emu.store.list(POD, namespace)
                       if (p["metadata"].get("labels") or {}).get(DGD_LABEL) == name
                       and p["metadata"]["labels"].get(COMPONENT_LABEL) == cname), key=lambda p: p["metadata"][
                          "creationTimestamp"])
        new = [p for p in pods if p["metadata"]["name"].startswith(prefix)]
        old = [p for p in pods if not p["metadata"]["name"].startswith(prefix)]
        unavailable, surge = self.rolling["maxUnavailable"], self.rolling["maxSurge"]

        def remove(pod):
            emu.api.remove(emu.registry.by_group_resource(*POD), pod)
            (new if pod in new else old).remove(pod)

        for pod in new[replicas:]:  # a scale-down: the newest go
            remove(pod)
        # Old pods that serve nothing go at once; the others while enough stay ready.
        for pod in [p for p in old if not _pod_ready(p)]:
            remove(pod)
        ready = sum(_pod_ready(p) for p in new + old)
        pool, clock = (namespace, name, cname), time.monotonic()
        for pod in list(old):
            if len(new) + len(old) > replicas + surge or ready - 1 >= replicas - unavailable:
                if clock < self._roll_after.get(pool, 0.0):
                    self._requeue_at[(namespace, name)] = self._roll_after[pool]
                    break
                remove(pod)
                ready -= 1
                if self.roll_delay:
                    self._roll_after[pool] = clock + self.roll_delay
        ctype = comp.get("type", "worker")
        sub = None
        if ctype in ("prefill", "decode") and self._alpha_worker(namespace, name, cname):
            ctype, sub = "worker", comp["type"]
        containers = ((comp.get("podTemplate") or {}).get("spec") or {}).get("containers") or [{}]
        image = containers[0].get("image") or "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
        limits = (containers[0].get("resources") or {}).get("limits") or {}
        room = max(0, min(replicas - len(new), replicas + surge - len(new) - len(old)))
        for _ in range(room):
            pod_name = f"{prefix}{secrets.token_hex(3)[:5]}"
            kwargs = {"dgd": name, "component": cname, "component_type": ctype, "sub_component_type": sub,
                      "image": image, "gpus": int(limits.get("nvidia.com/gpu", 0) or 0), "owner": owner,
                      **self.pod_overrides.get(cname, {})}
            overridden = bool(self.pod_overrides.get(cname))
            starting = {} if overridden else {"waiting_reason": "ContainerCreating", "ready": False}
            pod = with_shared_memory(build_pod(pod_name, namespace, **{**kwargs, **starting}),
                                     comp.get("sharedMemorySize"))
            # The main container runs the component's own command line, as the operator renders it.
            pod["spec"]["containers"][0].update({k: list(containers[0][k]) for k in ("command", "args")
                                                 if k in containers[0]})
            emu.put(pod)
            if not overridden:
                self._starting[(namespace, pod_name)] = (time.monotonic() + self.ready_delay, kwargs)

    def _alpha_worker(self, namespace: str, name: str, component: str) -> bool:
        dgd = self.emu.store.get(DGD, namespace, name)
        services = (dgd.get("spec") or {}).get("services") or {}
        return (services.get(component) or {}).get("componentType") == "worker"

    def _write_status(self, dgd: dict[str, Any], version: str, components: list[dict[str, Any]],
                      wanted: dict[str, int]) -> None:
        emu, meta = self.emu, dgd["metadata"]
        per_component: dict[str, Any] = {}
        not_ready, unschedulable = [], False
        for comp in components:
            cname = comp["name"]
            pods = [p for p in emu.store.list(POD, meta.get("namespace"))
                    if (p["metadata"].get("labels") or {}).get(DGD_LABEL) == meta["name"]
                    and p["metadata"]["labels"].get(COMPONENT_LABEL) == cname]
            ready = wanted[cname] if self.status_ahead else sum(1 for p in pods if _pod_ready(p))
            unschedulable = unschedulable or any(_unschedulable(p) for p in pods)
            entry = {"componentKind": "Deployment", "replicas": wanted[cname], "updatedReplicas": len(pods),
                     "readyReplicas": ready, "availableReplicas": ready,
                     "componentNames": [f"{meta['name']}-{cname.lower()}"]}
            if version == "v1alpha1":
                entry["componentName"] = entry["componentNames"][0]
            per_component[cname] = entry
            if ready < wanted[cname]:
                not_ready.append(f"{cname}: {ready}/{wanted[cname]} ready")
        old_status = dgd.get("status") or {}
        if not_ready:
            reason = "insufficient_capacity" if unschedulable else "pods_not_ready"
            cond = {"type": "Ready", "status": "False", "reason": reason,
                    "message": "Resources not ready: " + "; ".join(not_ready)}
        else:
            cond = {"type": "Ready", "status": "True", "reason": "all_resources_are_ready",
                    "message": "All resources are ready"}
        previous = next((c for c in old_status.get("conditions") or [] if c.get("type") == "Ready"), {})
        same = all(previous.get(k) == cond[k] for k in ("status", "reason", "message"))
        cond["lastTransitionTime"] = previous.get("lastTransitionTime") if same else now()
        cond["observedGeneration"] = meta.get("generation", 1)
        status = {**old_status, "state": "pending" if not_ready else "successful",
                  "observedGeneration": meta.get("generation", 1), "conditions": [cond],
                  ("services" if version == "v1alpha1" else "components"): per_component}
        if status != old_status:
            emu.set_status("dgd", meta["name"], status, namespace=meta.get("namespace"), manager=MANAGER)


def _pod_ready(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _unschedulable(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds)


def normalize_kube_resource_name(name: str) -> str:
    """``NormalizeKubeResourceName`` (internal/dynamo/graph.go): dots to ``-``, lower case."""
    return name.replace(".", "-").lower()


def with_shared_memory(pod: dict[str, Any], size: Any) -> dict[str, Any]:
    """``ApplySharedMemoryVolumeAndMount``: the ``shared-memory`` emptyDir at /dev/shm on the main
    container, ``size`` or 8Gi when unset; nothing when ``"0"`` (disabled)."""
    if size is not None and str(size) in ("0", "0Gi", "0Mi"):
        return pod
    spec = pod["spec"]
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") != SHM_VOLUME] + [
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": str(size or SHM_DEFAULT)}}]
    main = next((c for c in spec["containers"] if c.get("name") == "main"), spec["containers"][0])
    main["volumeMounts"] = [*(main.get("volumeMounts") or []), {"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    return pod
