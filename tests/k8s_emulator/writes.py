"""Create, replace, patch, apply and delete: the write pipeline shared by every endpoint."""

from __future__ import annotations

import random
import re
import uuid
from datetime import UTC, datetime
from typing import Any

from core import cel

from . import apply as ssa
from .errors import already_exists, bad_request, cause, conflict, invalid, not_found
from .patches import APPLY, CR_PATCH_TYPES, PATCH_TYPES, apply_patch, clone
from .request import Request
from .resources import Resource

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_SYSTEM_META = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds")
RETURNS_OBJECT_ON_DELETE = ("pods", "namespaces", "nodes", "services")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _without(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    meta = _without(obj.get("metadata") or {}, "resourceVersion", "managedFields")
    fields = [_without(e, "time") for e in (obj.get("metadata") or {}).get("managedFields") or []]
    return {**obj, "metadata": {**meta, "managedFields": fields}}


class WritesMixin:
    """The write half of :class:`~tests.k8s_emulator.api.Api` (needs ``self.emu``, ``self.store``)."""

    emu: Any
    store: Any

    def view(self, res: Resource, obj: dict[str, Any] | None, version: str) -> dict[str, Any] | None:
        raise NotImplementedError

    # -- entry points ----------------------------------------------------------------------------
    def create(self, req: Request) -> tuple[int, dict[str, Any]]:
        body = req.body
        if not isinstance(body, dict):
            raise bad_request("the body of the request is not a JSON object")
        if body.get("apiVersion") and body["apiVersion"] != req.api_version:
            raise bad_request(f"the API version in the data ({body['apiVersion']}) does not match the expected "
                              f"API version ({req.api_version})")
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
        if not meta.get("name"):
            raise invalid(req.res.kind, req.res.group, "", [cause(
                "FieldValueRequired", "Required value: name or generateName is required", "metadata.name")])
        if req.res.namespaced:
            self.require_namespace(req.namespace)
        if self.store.get(req.res.key, req.res.scoped(req.namespace), meta["name"]) is not None:
            raise already_exists(req.res.plural, req.res.group, meta["name"])
        return 201, self.write(req, None, body)

    def replace(self, req: Request, old: dict[str, Any] | None) -> dict[str, Any]:
        body = req.body
        if not isinstance(body, dict):
            raise bad_request("the body of the request is not a JSON object")
        if old is None:
            raise not_found(req.res.plural, req.res.group, req.name or "")
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if not rv and req.res.custom:
            raise invalid(req.res.kind, req.res.group, req.name or "", [cause(
                "FieldValueInvalid", "Invalid value: 0x0: must be specified for an update",
                "metadata.resourceVersion")])
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(req.res.plural, req.res.group, req.name or "")
        return self.write(req, old, body)

    def patch(self, req: Request, old: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        ctype = req.content_type
        if ctype not in (CR_PATCH_TYPES if req.res.custom else PATCH_TYPES):
            apply_patch(ctype, {}, {}, custom=req.res.custom)  # raises 415
        if ctype == APPLY:
            return self.server_side_apply(req, old)
        if old is None:
            raise not_found(req.res.plural, req.res.group, req.name or "")
        base = clone(self.view(req.res, old, req.version))
        patched = apply_patch(ctype, base, req.body, custom=req.res.custom)
        if not isinstance(patched, dict):
            raise bad_request("the patch did not produce an object")
        rv = (patched.get("metadata") or {}).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(req.res.plural, req.res.group, req.name or "")
        return 200, self.write(req, old, patched)

    def server_side_apply(self, req: Request, old: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        body = req.body
        if not isinstance(body, dict):
            raise bad_request("the body of an apply patch must be an object")
        if not req.query.get("fieldManager"):
            raise bad_request("PATCH /apply requires fieldManager: Required value: is required for apply patch")
        if body.get("apiVersion") != req.api_version or body.get("kind") != req.res.kind:
            raise bad_request(f"invalid object type: {body.get('apiVersion', '')}, Kind={body.get('kind', '')}")
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != req.name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL "
                              f"({req.name})")
        if old is None:
            if req.res.namespaced:
                self.require_namespace(req.namespace)
            live: dict[str, Any] = {}  # an apply that creates merges into an empty object
        else:
            if meta.get("resourceVersion") and meta["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise conflict(req.res.plural, req.res.group, req.name or "")
            live = clone(self.view(req.res, old, req.version))
        result, fields = self.field_manager(req).apply(live, body, ssa.Fields.read(live), req.query["fieldManager"],
                                                       req.sub or "", req.api_version, req.flag("force"))
        result.setdefault("metadata", {}).setdefault("name", req.name)
        return (201 if old is None else 200), self.write(req, old, result, fields=fields)

    def field_manager(self, req: Request) -> ssa.FieldManager:
        res = req.res

        def schema_of(api_version: str) -> dict[str, Any] | None:
            schema = res.schema(api_version.rpartition("/")[2]) if res.custom else None
            return schema.schema if schema else None

        def convert(obj: dict[str, Any], api_version: str) -> dict[str, Any]:
            return self.view(res, obj, api_version.rpartition("/")[2]) or obj

        return ssa.FieldManager(schema_of, convert, req.sub if req.sub in ("status", "scale") else "", res.status)

    # -- the pipeline -------------------------------------------------------------------------------
    def write(self, req: Request, old: dict[str, Any] | None, new: dict[str, Any],
              fields: ssa.Fields | None = None) -> dict[str, Any]:
        res, sub = req.res, req.sub or ""
        new = clone(new)
        if not isinstance(new.get("metadata", {}), dict):
            raise bad_request("metadata must be an object")
        meta = new.setdefault("metadata", {})
        if req.name and meta.get("name") and meta["name"] != req.name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL "
                              f"({req.name})")
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != req.namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent on "
                                  "the request")
            meta["namespace"] = req.namespace
        else:
            meta.pop("namespace", None)
        new["apiVersion"], new["kind"] = req.api_version, res.kind
        old_v = clone(self.view(res, old, req.version)) if old is not None else None
        if old_v is not None:
            meta["name"] = old_v["metadata"]["name"]
            for key in _SYSTEM_META:
                if key in old_v["metadata"]:
                    meta[key] = old_v["metadata"][key]
                else:
                    meta.pop(key, None)
            if sub == "status":
                new = {**old_v, "status": new.get("status")}
                if new["status"] is None:
                    del new["status"]
                meta = new["metadata"]
            elif res.status and sub != "status":
                self._keep_status(new, old_v)
        else:
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now())
            for key in ("resourceVersion", "deletionTimestamp", "managedFields"):
                meta.pop(key, None)
            if res.custom or res.crd is not None or res.plural == "customresourcedefinitions":
                meta["generation"] = 1
            self.initial_status(res, new)
        self.validate(req, new, old_v)
        for hook in list(self.emu.admission_hooks):
            hook(req, old_v, new)
        if old_v is not None and "generation" in meta and self._spec_changed(res, old_v, new):
            meta["generation"] = int(meta["generation"]) + 1
        self._record_fields(req, old_v, new, fields)
        if old_v is not None and _comparable(old_v) == _comparable(new):
            return old_v
        if req.dry_run:
            meta["resourceVersion"] = old["metadata"]["resourceVersion"] if old else ""
            return new
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self.remove(res, new)
        stored = self.store.commit(res.key, new, "MODIFIED" if old is not None else "ADDED")
        self.emu.after_write(res, stored, old)
        return stored

    def _keep_status(self, new: dict[str, Any], old_v: dict[str, Any]) -> None:
        if "status" in old_v:
            new["status"] = old_v["status"]
        else:
            new.pop("status", None)

    def initial_status(self, res: Resource, obj: dict[str, Any]) -> None:
        if res.custom and res.status:
            obj.pop("status", None)
        elif res.plural == "pods":
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif res.plural == "persistentvolumeclaims":
            obj["status"] = {"phase": "Pending"}  # until a volume binds it (none does here)
        elif res.plural == "namespaces":
            obj["status"] = {"phase": "Active"}
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        elif res.plural == "secrets" and obj.get("stringData"):
            import base64

            data = obj.setdefault("data", {})
            for key, value in obj.pop("stringData").items():
                data[key] = base64.b64encode(str(value).encode()).decode()

    @staticmethod
    def _spec_changed(res: Resource, old: dict[str, Any], new: dict[str, Any]) -> bool:
        skip = ("metadata", "status") if res.status else ("metadata",)
        changed = _without(old, *skip) != _without(new, *skip)
        return changed or bool(new["metadata"].get("deletionTimestamp")) != bool(old["metadata"].get(
            "deletionTimestamp"))

    def raw_schema(self, req: Request) -> dict[str, Any] | None:
        schema = req.res.schema(req.version)
        return schema.schema if schema else None

    def _record_fields(self, req: Request, old: dict[str, Any] | None, new: dict[str, Any],
                       fields: ssa.Fields | None) -> None:
        if fields is None:  # not an apply: the writer takes what it changed
            sub = req.sub if req.sub in ("status", "scale") else ""
            fields = self.field_manager(req).update(old, new, ssa.Fields.read(old), req.manager, sub,
                                                    req.api_version)
        fields.write(new)

    # -- validation -------------------------------------------------------------------------------
    def validate(self, req: Request, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        res, meta = req.res, obj["metadata"]
        causes = self.validate_meta(res, meta)
        schema = res.schema(req.version)
        if schema is not None:
            found = schema.normalize(obj)
            mode = req.field_validation
            if found.unknown and mode == "Strict":
                raise bad_request("strict decoding error: " + ", ".join(f'unknown field "{p}"' for p in found.unknown))
            if found.unknown and mode == "Warn":
                req.warnings.extend(f'unknown field "{p}"' for p in found.unknown)
            causes += found.duplicates + schema.validate(obj)
            causes += self.cel_causes(schema.schema, obj, old, causes)
        if causes:
            raise invalid(res.kind, res.group, meta.get("name", ""), causes)

    @staticmethod
    def cel_causes(schema: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None,
                   causes: list[dict[str, str]]) -> list[dict[str, str]]:
        """The CRD's ``x-kubernetes-validations`` rules (core.cel, a real CEL implementation), after the
        schema's errors, as the apiextensions-apiserver runs them (``customResourceStrategy.Validate``):
        a schema error of a blocking kind (type, required, enum, too long, too many) stops them with
        one error of its own (``hasBlockingErr``)."""
        blocking = {"FieldValueTypeInvalid", "FieldValueRequired", "FieldValueNotSupported", "FieldValueTooLong",
                    "FieldValueTooMany"}
        if any(c.get("reason") in blocking for c in causes):
            return [cause("FieldValueInvalid", 'Invalid value: "null": some validation rules were not checked '
                          "because the object was invalid; correct the existing errors to complete validation",
                          "<nil>")]
        body = {k: v for k, v in obj.items() if k != "metadata"}
        before = None if old is None else {k: v for k, v in old.items() if k != "metadata"}
        found = cel.rule_errors(schema, body) if before is None else cel.rule_errors(schema, body, before)
        return [cause(e.reason, e.detail, e.path) for e in found]

    @staticmethod
    def validate_meta(res: Resource, meta: dict[str, Any]) -> list[dict[str, str]]:
        causes = []
        name = meta.get("name", "")
        pattern, limit = (_DNS_LABEL, 63) if res.plural == "namespaces" else (_DNS_SUBDOMAIN, 253)
        if not pattern.match(name) or len(name) > limit:
            causes.append(cause("FieldValueInvalid", f'Invalid value: "{name}": a lowercase RFC 1123 '
                                f"{'label' if limit == 63 else 'subdomain'} must consist of lower case alphanumeric "
                                "characters, '-' or '.', and must start and end with an alphanumeric character",
                                "metadata.name"))
        for key, value in (meta.get("labels") or {}).items():
            prefix, _, label = key.rpartition("/")
            if (not _LABEL_NAME.match(label) or len(label) > 63
                    or (prefix and (not _DNS_SUBDOMAIN.match(prefix) or len(prefix) > 253))):
                causes.append(cause("FieldValueInvalid", f'Invalid value: "{key}": name part must consist of '
                                    "alphanumeric characters, '-', '_' or '.'", "metadata.labels"))
            if not isinstance(value, str) or not _LABEL_VALUE.match(value) or len(value) > 63:
                causes.append(cause("FieldValueInvalid", f'Invalid value: "{value}": a valid label must be an '
                                    "empty string or consist of alphanumeric characters, '-', '_' or '.', and "
                                    "must start and end with an alphanumeric character", "metadata.labels"))
        return causes

    def require_namespace(self, namespace: str | None) -> None:
        if self.store.get(("", "namespaces"), None, namespace or "") is None:
            if not self.emu.auto_create_namespaces:
                raise not_found("namespaces", "", namespace or "")
            self.emu.add_namespace(namespace or "default")

    # -- delete -------------------------------------------------------------------------------------
    def delete(self, req: Request, old: dict[str, Any] | None) -> dict[str, Any]:
        res = req.res
        if old is None:
            raise not_found(res.plural, res.group, req.name or "")
        options = req.body if req.raw_body else {}
        options = options if isinstance(options, dict) else {}
        pre = options.get("preconditions") or {}
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise conflict(res.plural, res.group, req.name or "")
        if pre.get("uid") and pre["uid"] != old["metadata"].get("uid"):
            raise conflict(res.plural, res.group, req.name or "")
        policy = req.query.get("propagationPolicy") or options.get("propagationPolicy") or "Background"
        if req.dry_run:
            return self.deleted_response(res, self.view(res, old, req.version))
        if old["metadata"].get("finalizers"):
            if old["metadata"].get("deletionTimestamp"):
                return self.view(res, old, req.version)
            marked = clone(old)
            marked["metadata"].update(deletionTimestamp=now(), deletionGracePeriodSeconds=0)
            if "generation" in marked["metadata"]:
                marked["metadata"]["generation"] += 1
            stored = self.store.commit(res.key, marked, "MODIFIED")
            self.emu.after_write(res, stored, old)
            return self.view(res, stored, req.version)
        return self.deleted_response(res, self.view(res, self.remove(res, old, policy), req.version))

    def deleted_response(self, res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        if res.plural in RETURNS_OBJECT_ON_DELETE and not res.group:
            return obj
        meta = obj["metadata"]
        details = {"name": meta["name"], "kind": res.plural, "uid": meta.get("uid")}
        if res.group:
            details["group"] = res.group
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def remove(self, res: Resource, obj: dict[str, Any], policy: str = "Background") -> dict[str, Any]:
        """Delete for real: emit DELETED, then collect dependents (ownerReferences) and contents."""
        gone = self.store.commit(res.key, clone(obj), "DELETED")
        uid = obj["metadata"].get("uid")
        namespace = obj["metadata"].get("namespace")
        for key in self.store.all_keys():
            dep_res = self.emu.registry.by_group_resource(*key)
            for dep in self.store.list(key, namespace if namespace else None):
                refs = dep["metadata"].get("ownerReferences") or []
                in_ns = res.plural == "namespaces" and dep["metadata"].get("namespace") == obj["metadata"]["name"]
                owned = any(r.get("uid") == uid for r in refs)
                if in_ns or (owned and policy != "Orphan"):
                    if self.store.get(key, dep["metadata"].get("namespace"), dep["metadata"]["name"]) is not None:
                        self.remove(dep_res or res, dep, policy)
                elif owned:
                    orphan = clone(dep)
                    orphan["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                    self.store.commit(key, orphan, "MODIFIED")
        if res.plural == "customresourcedefinitions":
            spec = obj["spec"]
            for item in self.store.list((spec["group"], spec["names"]["plural"])):
                self.store.commit((spec["group"], spec["names"]["plural"]), clone(item), "DELETED")
        self.emu.after_write(res, None, obj)
        return gone
