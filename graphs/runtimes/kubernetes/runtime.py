"""The Kubernetes runtime: a graph as a DynamoGraphDeployment on a registered cluster.

* apply: server-side apply of the rendered manifest under one field manager, in the graph's
  chosen API version; a conflict with another manager fails with the server's message (never
  forced); a server-side dry run (``dryRun=All``) previews it as a diff against the live object.
* scale: through the pool's DynamoGraphDeploymentScalingAdapter ``/scale`` when it exists,
  else a patch of the DGD (v1beta1: a JSON patch whose ``test`` op pins the list index to the
  component's name; v1alpha1: a merge patch of ``spec.services.<name>.replicas``); then the
  operation waits until the cluster runs the new count (scaled.py).
* delete: the DGD (the operator garbage-collects the rest); already gone is success.
* companions (the ConfigMaps, PVCs, DRA claims... the graph's file held): applied before the DGD,
  in its namespace, by the same server-side apply and in its dry runs too (companions.py); left
  in place by a delete, which says so.

Every cluster call goes through the adapter in kubernetes.py; the status cache is fed by the
watchers (watch.py), never by these calls."""

from __future__ import annotations

import copy
import difflib
import json
import re
import time

from clusters.kubernetes import (
    APPLY_PATCH,
    DGD,
    DGDSA,
    FIELD_MANAGER,
    JSON_PATCH,
    MERGE_PATCH,
    KubeClient,
    KubeFailure,
    connect,
    read_log,
)
from clusters.resources import adapter_name, custom_path
from clusters.selectors import cluster_named
from core.dgd import immutable, ownership, topology
from core.dgd.render import V1ALPHA1
from core.specio import dump_yaml

from ...companions import label
from ...models import GraphState
from ..base import ApplyResult, Target
from . import admission, companions, gateway, scaled
from .observe import dgd_name

_CONFLICT_WITH = re.compile(r'conflict with "([^"]+)"')
_NOISE_METADATA = ("managedFields", "resourceVersion", "uid", "generation", "creationTimestamp", "selfLink")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


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
    return dgd_name(deployment.manifest, spec.name)


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


def _replicas_component(field_path: tuple[str, ...]) -> str | None:
    """The component whose replicas a field path is (either API version), else None."""
    if len(field_path) == 4 and field_path[:2] in (("f:spec", "f:components"), ("f:spec", "f:services")) \
            and field_path[3] == "f:replicas":
        seg = field_path[2]
        return json.loads(seg[2:]).get("name") if seg.startswith("k:") else seg[2:]
    return None


def _owned_by(obj: dict, dgd: dict) -> dict:
    """``obj`` owned by the applied DGD when it is in the DGD's namespace (an owner must be in
    the dependent's namespace), so that deleting the DGD deletes it."""
    meta = dgd["metadata"]
    if obj["metadata"]["namespace"] != meta.get("namespace") or not meta.get("uid"):
        return obj
    owner = {"apiVersion": dgd["apiVersion"], "kind": dgd["kind"], "name": meta["name"], "uid": meta["uid"]}
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner]}}


def _webhook_denial(failure: KubeFailure) -> bool:
    return "admission webhook" in str(failure) and "denied the request" in str(failure)


def _conflicting_managers(failure: KubeFailure) -> set[str]:
    texts = [c.get("message", "") for c in (failure.body.get("details") or {}).get("causes") or []]
    return set(_CONFLICT_WITH.findall("\n".join(texts) or str(failure)))


class KubernetesRuntime:
    kind = "kubernetes"

    # The operations' questions (runtimes/base.py states them; admission.py answers them).
    admit_apply = staticmethod(admission.admit_apply)
    admit_scale = staticmethod(admission.admit_scale)
    change_refused = staticmethod(admission.rollout_in_progress)
    apply_target = staticmethod(admission.apply_target)
    settle_scale = admission.settle_scale  # (runtime, runner, ...): it waits through this runtime

    def apply(self, *, target: Target, spec, manifest: dict, dry_run: bool = False, deployment,
              revision, force: bool = False, recreate: bool = False) -> ApplyResult:
        api_version, name, namespace = manifest["apiVersion"], manifest["metadata"]["name"], target.namespace
        body = copy.deepcopy(manifest)
        body["metadata"]["namespace"] = namespace
        stored = copy.deepcopy(body)  # the revision as rendered: drift is measured against it
        path = custom_path(api_version, DGD, namespace, name)
        what = f"apply DynamoGraphDeployment {namespace}/{name} ({api_version}) on cluster {target.cluster}"
        warnings: list[str] = []
        beside = gateway.objects_beside(graph=deployment.graph, dgd_name=name, namespace=namespace, spec=spec)
        kept = companions.placed(revision.companions, namespace)  # the file's ConfigMaps, PVCs...: before the DGD
        strict = [("fieldManager", FIELD_MANAGER), ("fieldValidation", "Strict")]
        with connect(target.cluster) as kube:
            kept_at = companions.resolve(kube, kept, target.cluster)
            # A server dry run first: a kind the cluster lacks, or an object it refuses, writes nothing at all.
            previews = companions.apply(kube, kept_at, [*strict, ("dryRun", "All")], cluster=target.cluster,
                                        force=force)
            for obj in beside:
                self._apply_beside(kube, obj, [("fieldManager", FIELD_MANAGER), ("dryRun", "All")], target.cluster)
            live = kube.get(path, what=what)
            change = topology.change(topology.components(live), topology.components(body) or [])
            if change is not None and not recreate:
                raise KubeFailure(f"{what}: {change.refusal(name, revision.number)}", status=422)
            fixed = immutable.changes(live, body)  # what else the operator's webhook refuses to change
            if fixed and not recreate:
                raise KubeFailure(f"{what}: {immutable.refusal(name, revision.number, fixed)}", status=422)
            recreating = change is not None or bool(fixed)
            if recreating and not dry_run:
                self._delete_and_wait(kube, path, what)
                what_changed = [f"revision {revision.number} {change.describe()}"] if change is not None else []
                what_changed += [f"revision {revision.number} changes {f.describe()}" for f in fixed]
                warnings.append(f"deleted and recreated: the live DGD had {', '.join(topology.components(live))}, "
                                + "; ".join(what_changed))
                live = None
            held = self._adapter_held(spec, body, live)
            kept = [] if force else self._leave_foreign(body, live)
            taken = ownership.foreign_fields(body, live) if force else []
            query = [("fieldManager", FIELD_MANAGER), ("fieldValidation", "Strict")]
            if dry_run:
                query.append(("dryRun", "All"))
            kept_results = previews if dry_run else companions.apply(kube, kept_at, query, cluster=target.cluster,
                                                                      force=force)
            if recreating and dry_run:
                after = body  # the server cannot preview a create over the live object: show the new one
            elif force:
                after = self._server_side_apply(kube, path, body, [*query, ("force", "true")], what, api_version)
            else:
                after = self._server_side_apply(kube, path, body, query, what, api_version)
            # What goes beside the DGD (its endpoint through the cluster's gateway, when asked).
            for obj in beside:
                self._apply_beside(kube, _owned_by(obj, after) if not dry_run else obj, query, target.cluster)
        diff = live_diff(live, after, live_label=f"live {target.cluster}/{namespace}/{name}",
                         after_label=f"revision {revision.number}" + (" (server dry run)" if dry_run else ""))
        diff += "".join(live_diff(before, result, live_label=f"live {target.cluster}/{what}",
                                  after_label=f"revision {revision.number}: {what}" + (" (server dry run)" if dry_run
                                                                                       else ""))
                        for before, result, what in kept_results)
        warnings += [f"{component} keeps its live {count} replicas: its scaling adapter owns the count (the Dynamo "
                     "operator's webhook refuses any other writer); scale it through the adapter"
                     for component, count in held.items() if count != _replicas_of(manifest, component)]
        warnings += [f"left {ownership.dotted(p)} at {theirs!r} (revision: {ours!r}): owned by "
                     f"{', '.join(o.label for o in who)}; apply with force to take it" for p, ours, theirs, who in kept]
        warnings += [f"took {ownership.dotted(p)} from {', '.join(o.label for o in who)}: {theirs!r} -> {ours!r}"
                     for p, ours, theirs, who in taken]
        if dry_run:
            return ApplyResult(changed=live is None or bool(diff), diff=diff, warnings=warnings)
        changed = (live is None or after["metadata"].get("resourceVersion") != live["metadata"].get("resourceVersion")
                   or companions.changed(kept_results))
        deployment.runtime, deployment.namespace = self.kind, namespace
        deployment.cluster = cluster_named(target.cluster)
        deployment.revision, deployment.manifest, deployment.api_version = revision, stored, api_version
        # An apply sets every pool to the revision's replicas, except those another owner keeps.
        deployment.replicas = {c: n for c, n in held.items() if n != _replicas_of(manifest, c)}
        for field_path, _ours, theirs, _who in kept:
            component = _replicas_component(field_path)
            if component and isinstance(theirs, int):
                deployment.replicas[component] = theirs
        if changed or not deployment.active:
            deployment.generation += 1
            deployment.state = GraphState.PROGRESSING
            deployment.message = f"revision {revision.number} applied; waiting for the Dynamo operator"
        deployment.active = True
        return ApplyResult(changed=changed, diff=diff, warnings=warnings)

    def _delete_and_wait(self, kube: KubeClient, path: str, what: str, timeout: float = 60.0) -> None:
        """Delete the DGD and wait until it is gone (its finalizer runs first), so the create that
        follows is a create and not an update of the terminating object."""
        try:
            kube.call("DELETE", path, what=what, query=[("propagationPolicy", "Foreground")])
        except KubeFailure as exc:
            if exc.status != 404:
                raise
        deadline = time.monotonic() + timeout
        while kube.get(path, what=what) is not None:
            if time.monotonic() > deadline:
                raise KubeFailure(f"{what}: the old DynamoGraphDeployment is still terminating after {timeout:.0f}s; "
                                  "apply again once it is gone", transient=True)
            time.sleep(0.5)

    def _adapter_held(self, spec, body: dict, live: dict | None) -> dict[str, int]:
        """Pools whose component has ``scalingAdapter`` in the live or the applied spec keep their
        live replicas: the operator's webhook refuses any other count from anyone but the operator
        and the Planner, whether or not the adapter object exists yet
        (webhook/validation/shared_v1beta1.go@2a6da14c:663-670)."""
        held: dict[str, int] = {}
        if live is None:
            return held
        live_names = topology.components(live) or []
        for service in spec.services:
            if service.name not in live_names:
                continue
            # No replicas on the live object reads as 1, as the webhook compares them (nil -> 1).
            count = _replicas_of(live, service.name)
            count = 1 if count is None else count
            if ownership.has_adapter(live, service.name) or ownership.has_adapter(body, service.name):
                _set_replicas(body, service.name, count)
                held[service.name] = count
        return held

    def _leave_foreign(self, body: dict, live: dict | None) -> list:
        """Leave out of the apply every field another manager owns (for a list-map item, all but its
        key fields), so that a plain apply neither changes nor co-owns it: re-sending their live
        value would make us a co-owner, and their next change would conflict with us. Returns the
        fields whose live value differs from the revision's."""
        kept = []
        for found in ownership.foreign_fields(body, live, differing=False):
            field_path, ours, theirs, _who = found
            if ownership.leave_out(body, field_path) and theirs != ours:
                kept.append(found)
        return kept

    def _apply_beside(self, kube: KubeClient, obj: dict, query: list, cluster: str) -> None:
        """Server-side apply an object of ours beside the DGD (ours alone: force)."""
        what = f"apply {obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']} on cluster {cluster}"
        try:
            kube.call("PATCH", gateway.object_path(obj), what=what, query=[*query, ("force", "true")], body=obj,
                      content_type=APPLY_PATCH)
        except KubeFailure as exc:
            if exc.status != 404:
                raise
            raise KubeFailure(f"{exc}. Cluster {cluster} does not serve {obj['apiVersion']} {obj['kind']} (or the "
                              f"namespace does not exist): install it, or stop applying the graph's gateway objects "
                              "with it on its Gateway page", status=404) from None

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
                    "apply with force to take them.", status=409, body=exc.body) from None
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
                live = kube.get(custom_path(api_version, DGD, namespace, name), what=what)
                if ownership.has_adapter(live, service):
                    # The webhook refuses a DGD patch of this component's replicas even before the
                    # operator has created its adapter (webhook/validation/shared_v1beta1.go@2a6da14c:663-670).
                    raise KubeFailure(f"{what}: {service} has a scaling adapter that the Dynamo operator has not "
                                      f"created yet ({adapter_name(name, service)}); its replicas can only be "
                                      "set through it: try again once it exists", transient=True) from None
                self._patch_dgd_replicas(kube, api_version, namespace, name, service, replicas, what)
        overrides = dict(deployment.replicas or {})
        overrides[service] = replicas
        deployment.replicas = overrides
        deployment.generation += 1

    def wait_scaled(self, *, target: Target, spec, service: str, replicas: int, deployment, timeout: float,
                    stop=None) -> scaled.PoolSeen:
        """After :meth:`scale`: wait until the cluster runs ``replicas`` of ``service``
        (scaled.wait_scaled); the last look."""
        return scaled.wait_scaled(target=target, name=_dgd_name(deployment, spec), api_version=deployment.api_version,
                                  service=service, replicas=replicas, timeout=timeout, stop=stop)

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
                # 422 is both a failed test op (the list moved: read again) and the operator's
                # webhook refusing the change (422 Invalid now, 403 in older releases): only the
                # first is worth another try.
                if exc.status != 422 or attempt == 2 or _webhook_denial(exc):
                    raise

    def delete(self, *, target: Target, spec, deployment) -> None:
        name, namespace = _dgd_name(deployment, spec), target.namespace
        what = f"delete DynamoGraphDeployment {namespace}/{name} on cluster {target.cluster}"
        # The gateway objects in the DGD's namespace go with it (their ownerReferences: the API
        # server's garbage collector); one in another namespace (the ReferenceGrant beside the
        # control plane) cannot name an owner there, so it is deleted here.
        elsewhere = [obj for obj in gateway.objects_beside(graph=deployment.graph, dgd_name=name, namespace=namespace,
                                                           spec=spec) if obj["metadata"]["namespace"] != namespace]
        with connect(target.cluster) as kube:
            try:
                kube.call("DELETE", custom_path(deployment.api_version, DGD, namespace, name), what=what)
            except KubeFailure as exc:
                if exc.status != 404:  # already gone is what we wanted
                    raise
            for obj in elsewhere:
                try:
                    kube.call("DELETE", gateway.object_path(obj), what=f"delete {obj['kind']} "
                              f"{obj['metadata']['namespace']}/{obj['metadata']['name']} on cluster {target.cluster}")
                except KubeFailure as exc:
                    if exc.status != 404:
                        raise
        deployment.active = False
        deployment.generation += 1
        deployment.state = GraphState.DELETING
        deployment.message = "delete requested: the Dynamo operator removes the pods"
        kept = [label(c) for c in (deployment.revision.companions if deployment.revision_id else [])]
        if kept:
            deployment.message += (f"; {', '.join(kept)} stay{'s' if len(kept) == 1 else ''} in {namespace} (they may "
                                   "hold data or be shared): delete them with kubectl when they are no longer needed")

    def pod_log(self, *, deployment, pod: str, lines: int = 200) -> str:
        with connect(deployment.cluster) as kube:
            return read_log(kube, deployment.namespace, pod, lines=lines)

