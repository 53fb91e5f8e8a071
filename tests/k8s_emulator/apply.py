"""Field ownership (``metadata.managedFields``) and server-side apply, as the API server's field
manager does them (kubernetes/apimachinery at eed236ceee2c19c2753a3d93ac0631dc20750454,
``pkg/util/managedfields/internal/``), on the emulator's own structured-merge-diff (:mod:`.smd`):

* managers are told apart by name, operation and subresource, and an updater also by its API
  version (``managedfields.go`` ``BuildManagerIdentifier``);
* ``apiVersion``, ``kind`` and the server-set metadata are nobody's (``stripmeta.go``); on the
  main endpoint of a resource with a ``status`` subresource ``status`` is nobody's, through
  ``/status`` only ``status`` is (the reset fields);
* a write by a manager that changes any field stamps its entry's ``time`` and merges into its
  earlier entry (``managedfieldsupdater.go``: an update runs as ``current-operation``); an apply
  stamps it when the object changed;
* a conflict answers 409 "Apply failed with N conflict(s): ..." with one cause per field
  (``conflict.go``).

The merged object is defaulted after the merge, by the write pipeline, as ``structuredmerge.go``
defaults ``newObjVersioned``; a list-map key missing from an applied item is read with its schema
default (``typed/helpers.go`` ``keyedAssociativeListItemToPathElement``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from . import smd
from .errors import ApiError
from .patches import clone
from .smd.fieldpath import Path, field
from .smd.schema import object_type

Key = tuple[str, str, str, str]  # manager, operation, subresource, API version (updaters only)
CURRENT = ("current-operation", "Update", "", "")
_STRIPPED = {(field("apiVersion"),), (field("kind"),), (field("metadata"),)} | {
    (field("metadata"), field(name)) for name in ("name", "namespace", "creationTimestamp", "selfLink", "uid",
                                                  "clusterName", "generation", "managedFields", "resourceVersion",
                                                  "deletionTimestamp", "deletionGracePeriodSeconds")}


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(manager: str, operation: str, subresource: str, api_version: str) -> Key:
    return (manager, operation, subresource, api_version if operation == "Update" else "")


class Fields:
    """The managedFields of one object: per manager its field set and its time."""

    def __init__(self, managers: dict[Key, smd.Managed] | None = None, times: dict[Key, str] | None = None):
        self.managers = managers or {}
        self.times = times or {}

    @classmethod
    def read(cls, obj: dict[str, Any] | None) -> Fields:
        out = cls()
        for entry in ((obj or {}).get("metadata") or {}).get("managedFields") or []:
            key = key_of(entry.get("manager", ""), entry.get("operation", "Update"), entry.get("subresource", ""),
                         entry.get("apiVersion", ""))
            out.managers[key] = smd.Managed(smd.from_fields_v1(entry.get("fieldsV1") or {}),
                                            entry.get("apiVersion", ""), entry.get("operation") == "Apply")
            out.times[key] = entry.get("time", "")
        return out

    def write(self, obj: dict[str, Any]) -> None:
        entries = []
        for key, managed in self.managers.items():
            if not managed.fields:
                continue
            manager, operation, sub, _ = key
            entry = {"manager": manager, "operation": operation, "apiVersion": managed.version,
                     "time": self.times.get(key) or now(), "fieldsType": "FieldsV1",
                     "fieldsV1": smd.to_fields_v1(managed.fields)}
            if sub:
                entry["subresource"] = sub
            entries.append(entry)
        obj.setdefault("metadata", {})["managedFields"] = entries


def _ignore(subresource: str, has_status: bool) -> Callable[[set[Path]], set[Path]]:
    def keep(fields: set[Path]) -> set[Path]:
        out = {p for p in fields if p not in _STRIPPED}
        if subresource == "status":
            return {p for p in out if p[:1] == (field("status"),)}
        if has_status:
            return {p for p in out if p[:1] != (field("status"),)}
        return out

    return keep


def _bare(obj: Any) -> Any:
    if not isinstance(obj, dict):
        return obj
    out = dict(obj)
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = {k: v for k, v in out["metadata"].items() if k != "managedFields"}
    return out


class FieldManager:
    """The field manager of one resource: ``schema_of(api_version)`` gives its CRD schema (or
    None), ``convert(obj, api_version)`` an object in another served version."""

    def __init__(self, schema_of: Callable[[str], dict[str, Any] | None], convert: Callable[[Any, str], Any],
                 subresource: str, has_status: bool):
        ignore = _ignore(subresource, has_status)
        self.updater = smd.Updater(type_of=lambda v: object_type(schema_of(v)), convert=self._safe(convert),
                                   ignore=ignore)

    def _safe(self, convert: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
        def run(obj: Any, version: str) -> Any:
            if not isinstance(obj, dict) or not obj.get("apiVersion") or obj.get("apiVersion") == version:
                return obj
            try:
                return convert(obj, version)
            except Exception:  # a partial object the conversion cannot read: compare it as it is
                return obj

        return run

    def update(self, old: dict[str, Any] | None, new: dict[str, Any], fields: Fields, manager: str,
               subresource: str, api_version: str) -> Fields:
        """A create, replace or patch: ``managedfieldsupdater.go`` ``Update``."""
        live = _bare(old) if old is not None else {}
        managers = self.updater.update(live, _bare(new), api_version, dict(fields.managers), CURRENT)
        times = dict(fields.times)
        mine = managers.pop(CURRENT, None)
        if mine is not None:
            key = key_of(manager, "Update", subresource, api_version)
            previous = managers.get(key)
            managers[key] = smd.Managed(mine.fields | (previous.fields if previous else set()), api_version, False)
            times[key] = now()
        return Fields(managers, times)

    def apply(self, live: dict[str, Any], config: dict[str, Any], fields: Fields, manager: str, subresource: str,
              api_version: str, force: bool) -> tuple[dict[str, Any], Fields]:
        """A server-side apply: the merged object (the live one when nothing changed) and the
        fields; 409 on a conflict without ``force``."""
        key = key_of(manager, "Apply", subresource, api_version)
        try:
            new, managers = self.updater.apply(_bare(live), clone(config), api_version, dict(fields.managers), key,
                                               force)
        except smd.ConflictError as exc:
            raise conflict_error(exc.conflicts, fields) from None
        except smd.typed.SchemaError as exc:
            raise ApiError(422, f"failed to create typed patch object: {exc}", "Invalid") from None
        times = dict(fields.times)
        if new is not None:
            times[key] = now()
        return (new if new is not None else _bare(live)), Fields(managers, times)


def print_manager(key: Key, fields: Fields) -> str:
    """``conflict.go`` ``printManager``."""
    manager, operation, sub, api_version = key
    text = f'"{manager}"' + (f' with subresource "{sub}"' if sub else "")
    if operation == "Update":
        stamp = fields.times.get(key)
        return f"{text} using {api_version}" + (f" at {stamp}" if stamp else "")
    return text


def conflict_error(conflicts: list[smd.Conflict], fields: Fields) -> ApiError:
    """``conflict.go`` ``NewConflictError``: 409 Conflict, a cause per field."""
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {print_manager(c.manager, fields)}",
               "field": smd.path_string(c.path)} for c in conflicts]
    if len(conflicts) == 1:
        c = conflicts[0]
        message = (f"Apply failed with 1 conflict: conflict with {print_manager(c.manager, fields)}: "
                   f"{smd.path_string(c.path)}")
    else:
        by_manager: dict[Key, list[str]] = {}
        for c in conflicts:
            by_manager.setdefault(c.manager, []).append(smd.path_string(c.path))
        lines = []
        for manager in sorted(by_manager, key=lambda k: str(k)):
            lines.append(f"conflicts with {print_manager(manager, fields)}:")
            lines += [f"- {p}" for p in by_manager[manager]]
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, message, "Conflict", {"causes": causes})
