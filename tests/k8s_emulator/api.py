"""Request dispatch and the read side: get, list (with pagination), watch, ``/scale`` and ``/log``."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

from .conversion import relabel
from .errors import ApiError, bad_request, cause, conflict, invalid, not_found
from .patches import APPLY, MERGE, apply_patch, clone
from .request import Request
from .resources import Resource
from .selectors import matcher
from .store import Event
from .writes import WritesMixin

Result = tuple[int, Any]


class Api(WritesMixin):
    def __init__(self, emu: Any):
        self.emu = emu
        self.store = emu.store

    def view(self, res: Resource, obj: dict[str, Any] | None, version: str) -> dict[str, Any] | None:
        """``obj`` as the requested version shows it (the conversion hook of the CRD)."""
        if obj is None or not res.custom or obj.get("apiVersion") == res.api_version(version):
            return obj
        return self.emu.converters.get(res.key, relabel)(obj, version)

    # -- dispatch ---------------------------------------------------------------------------------
    def handle(self, req: Request) -> Result:
        if req.res.deprecations.get(req.version):
            req.warnings.append(req.res.deprecations[req.version])
        if req.method == "GET":
            return self._dispatch(req)
        with self.store.cond:  # writes are serialised: read-check-commit is atomic, as in etcd
            return self._dispatch(req)

    def _dispatch(self, req: Request) -> Result:
        res = req.res
        if req.name is None:
            if req.method == "GET":
                return (200, self.watch(req)) if req.flag("watch") else (200, self.list(req))
            if req.method == "POST":
                return self.create(req)
            if req.method == "DELETE":
                return 200, self.delete_collection(req)
            raise ApiError(405)
        old = self.store.get(res.key, res.scoped(req.namespace), req.name)
        if req.sub == "scale":
            return self.scale(req, old)
        if req.sub == "log" and "log" in res.subresources and req.method == "GET":
            return self.log(req, old)
        if req.sub not in (None, "status") or (req.sub == "status" and not res.status):
            raise ApiError(404)
        if req.method == "GET":
            if old is None:
                raise not_found(res.plural, res.group, req.name)
            return 200, self.view(res, old, req.version)
        if req.method == "PUT":
            return 200, self.replace(req, old)
        if req.method == "PATCH":
            return self.patch(req, old)
        if req.method == "DELETE" and req.sub is None:
            return 200, self.delete(req, old)
        raise ApiError(405)

    # -- list -------------------------------------------------------------------------------------
    def _matcher(self, req: Request) -> Any:
        return matcher(req.query.get("labelSelector"), req.query.get("fieldSelector"), req.res.field_labels)

    def list(self, req: Request) -> dict[str, Any]:
        res = req.res
        match = self._matcher(req)
        try:
            limit = int(req.query.get("limit") or 0)
        except ValueError:
            raise bad_request(f"limit: Invalid value: {req.query['limit']!r}") from None
        with self.store.cond:
            objs, rv = self.store.list(res.key, res.scoped(req.namespace)), self.store.rv
        start = ""
        if req.query.get("continue"):
            try:
                token = json.loads(base64.b64decode(req.query["continue"]))
                start, rv = token["start"], int(token["rv"])
            except (ValueError, KeyError, TypeError):
                raise bad_request("continue key is not valid") from None
            if rv < self.store.floor:
                raise ApiError(410, "The provided continue parameter is too old to display a consistent list "
                               "result. You can start a new list without the continue parameter.", "Expired")
        items = []
        for obj in objs:
            meta = obj["metadata"]
            if start and f"{meta.get('namespace', '')}/{meta['name']}" <= start:
                continue
            shown = self.view(res, obj, req.version)
            if match(shown):
                items.append(shown)
        meta_out: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = {"rv": rv, "start": f"{last.get('namespace', '')}/{last['name']}"}
            meta_out["continue"] = base64.b64encode(json.dumps(token).encode()).decode()
            if not req.query.get("labelSelector") and not req.query.get("fieldSelector"):
                meta_out["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        if not res.custom:
            items = [{k: v for k, v in i.items() if k not in ("apiVersion", "kind")} for i in items]
        return {"kind": res.list_kind, "apiVersion": req.api_version, "metadata": meta_out, "items": items}

    def delete_collection(self, req: Request) -> dict[str, Any]:
        listed = self.list(Request("GET", req.res, req.version, req.namespace, None, None,
                                   {k: v for k, v in req.query.items() if k in ("labelSelector", "fieldSelector")}))
        deleted = []
        for item in listed["items"]:
            meta = item["metadata"]
            old = self.store.get(req.res.key, meta.get("namespace"), meta["name"])
            one = Request("DELETE", req.res, req.version, meta.get("namespace"), meta["name"], None, req.query,
                          user_agent=req.user_agent)
            if old is not None:
                self.delete(one, old)
                deleted.append(self.view(req.res, old, req.version))
        return {**listed, "items": deleted}

    # -- watch ------------------------------------------------------------------------------------
    def watch(self, req: Request) -> Iterator[dict[str, Any]]:
        res = req.res
        match = self._matcher(req)
        namespace = res.scoped(req.namespace)
        try:
            timeout = float(req.query.get("timeoutSeconds") or self.emu.watch_timeout)
            since_param = req.query.get("resourceVersion") or ""
            since = int(since_param) if since_param not in ("", "0") else None
        except ValueError:
            raise bad_request("invalid resourceVersion or timeoutSeconds") from None
        bookmarks = req.flag("allowWatchBookmarks")
        initial = req.flag("sendInitialEvents")

        def visible(obj: dict[str, Any] | None) -> dict[str, Any] | None:
            if obj is None or (namespace is not None and obj["metadata"].get("namespace") != namespace):
                return None
            shown = self.view(res, obj, req.version)
            return shown if match(shown) else None

        def translate(event: Event) -> dict[str, Any] | None:
            new = visible(event.obj)
            if event.type == "DELETED":
                return {"type": "DELETED", "object": new} if new else None
            old = visible(event.old) if event.type == "MODIFIED" else None
            if new and old:
                return {"type": "MODIFIED", "object": new}
            if new:
                return {"type": "ADDED", "object": new}
            if old:
                shown = self.view(res, event.obj, req.version)
                return {"type": "DELETED", "object": shown}
            return None

        def bookmark(rv: int, initial_end: bool = False) -> dict[str, Any]:
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if initial_end:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            return {"type": "BOOKMARK", "object": {"kind": res.kind, "apiVersion": req.api_version, "metadata": meta}}

        def stream() -> Iterator[dict[str, Any]]:
            deadline = time.monotonic() + timeout
            try:
                if since is None or initial:
                    objs, position = self.store.snapshot(res.key, namespace)
                    for obj in objs:
                        shown = visible(obj)
                        if shown:
                            yield {"type": "ADDED", "object": shown}
                    if initial and bookmarks:
                        yield bookmark(position, initial_end=True)
                else:
                    position = since
                    self.store.check_resumable(position)
                last_bookmark = time.monotonic()
                epoch = self.store.epoch
                while True:
                    events, position = self.store.wait(res.key, position, deadline, epoch)
                    for event in events:
                        out = translate(event)
                        if out:
                            yield out
                    now = time.monotonic()
                    if now >= deadline or self.store.closed or self.store.epoch != epoch:
                        break
                    if bookmarks and now - last_bookmark >= self.emu.bookmark_interval:
                        last_bookmark = now
                        yield bookmark(position)
                if bookmarks:
                    yield bookmark(position)
            except ApiError as err:
                yield {"type": "ERROR", "object": err.body}

        return stream()

    # -- subresources -----------------------------------------------------------------------------
    def scale(self, req: Request, old: dict[str, Any] | None) -> Result:
        res = req.res
        if not res.scale:
            raise ApiError(404)
        if old is None:
            raise not_found(res.plural, res.group, req.name or "")
        obj = self.view(res, old, req.version)
        if req.method == "GET":
            return 200, self.scale_of(res, obj)
        if req.method == "PUT":
            new_scale = req.body
        elif req.method == "PATCH":
            ctype = MERGE if req.content_type == APPLY else req.content_type
            new_scale = apply_patch(ctype, self.scale_of(res, obj), req.body, custom=False)
        else:
            raise ApiError(405)
        if not isinstance(new_scale, dict):
            raise bad_request("the body of the request is not a Scale object")
        replicas = (new_scale.get("spec") or {}).get("replicas")
        if isinstance(replicas, int) and not isinstance(replicas, bool) and not -2**31 <= replicas < 2**31:
            raise _not_int32(req, new_scale, replicas)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid("Scale", "autoscaling", req.name or "", [cause(
                "FieldValueInvalid", f"Invalid value: {json.dumps(replicas)}: must be greater than or equal to 0",
                "spec.replicas")])
        rv = (new_scale.get("metadata") or {}).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(res.plural, res.group, req.name or "")
        updated = clone(obj)
        set_path(updated, res.scale["specReplicasPath"], replicas)
        stored = self.write(req, old, updated)
        return 200, self.scale_of(res, stored)

    @staticmethod
    def scale_of(res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        spec = res.scale or {}
        meta = obj["metadata"]
        scale: dict[str, Any] = {
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": get_path(obj, spec["specReplicasPath"]) or 0},
            "status": {"replicas": get_path(obj, spec["statusReplicasPath"]) or 0},
        }
        selector = get_path(obj, spec.get("labelSelectorPath", ""))
        if selector:
            scale["status"]["selector"] = selector
        return scale

    def log(self, req: Request, old: dict[str, Any] | None) -> Result:
        if old is None:
            raise not_found("pods", "", req.name or "")
        names = [c["name"] for c in (old.get("spec") or {}).get("containers", [])]
        container = req.query.get("container")
        if container is None and len(names) > 1:
            raise bad_request(f"a container name must be specified for pod {req.name}, choose one of: "
                              f"[{' '.join(names)}]")
        if container is not None and container not in names:
            raise bad_request(f"container {container} is not valid for pod {req.name}")
        container = container or (names[0] if names else None)
        logs = self.emu.pod_logs
        text = logs.get((req.namespace, req.name, container), logs.get((req.namespace, req.name, None), ""))
        if req.query.get("limitBytes"):  # from the start of the log, as the kubelet counts it
            text = text.encode()[: int(req.query["limitBytes"])].decode("utf-8", "ignore")
        if req.query.get("tailLines"):
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(req.query["tailLines"]):]) if int(req.query["tailLines"]) else ""
        return 200, text


def _not_int32(req: Request, scale: dict[str, Any], replicas: int) -> ApiError:
    """A Scale's ``spec.replicas`` is an int32: the decode fails. After a patch the API server answers
    422 on field ``patch`` (kubernetes/apiserver 24a394e516bfda066d7e2221d7d92c052de27c54,
    pkg/endpoints/handlers/patch.go ``applyPatchToCurrentObject``); a PUT body that does not decode
    is 400 (handlers/rest.go ``transformDecodeError``)."""
    error = (f"json: cannot unmarshal number {replicas} into Go struct field ScaleSpec.spec.replicas of type "
             "int32")
    if req.method == "PUT":
        return bad_request(f'Scale in version "v1" cannot be handled as a Scale: {error}')
    text = json.dumps(scale, separators=(",", ":"))
    return ApiError(422, f' "" is invalid: patch: Invalid value: {json.dumps(text)}: {error}', "Invalid",
                    {"causes": [{"reason": "FieldValueInvalid", "message": f"Invalid value: {json.dumps(text)}: "
                                 f"{error}", "field": "patch"}]})


def get_path(obj: Any, dotted: str) -> Any:
    cur = obj
    for part in [p for p in dotted.split(".") if p]:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def set_path(obj: dict[str, Any], dotted: str, value: Any) -> None:
    parts = [p for p in dotted.split(".") if p]
    cur = obj
    for part in parts[:-1]:
        cur = cur.setdefault(part, {})
    cur[parts[-1]] = value
