"""Who owns what in a live DynamoGraphDeployment, read from ``metadata.managedFields``: the pure
part of ownership-aware apply and drift (no client, no database).

Fields are paths in the FieldsV1 notation (``("f:spec", "f:components", 'k:{"name":"decode"}',
"f:replicas")``), lists merged by the keys the CRD schema declares (``x-kubernetes-list-map-keys``),
as server-side apply does; other lists are atomic.

Autoscalers are recognised from the objects themselves, never from a list of fields to ignore:
* a manager that wrote a ``scale`` subresource (HPA, KEDA and the Planner scale adapters through
  ``/scale``) is an autoscaler wherever it writes;
* the replicas of a component that has ``scalingAdapter`` belong to its adapter: the CRD says the
  adapter owns the field and the operator copies the adapter's count into it;
* the Planner sets no ``fieldManager`` (``dynamo/planner/connectors/clients/kubernetes_api.py``
  uses CustomObjectsApi as is), so the API server names it after its client's user agent,
  ``OpenAPI-Generator``: in a graph with a Planner component that manager is the Planner.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any

from core.schema import load_crd

Path = tuple[str, ...]
CONTROL_PLANE = "dynamo-control-plane"  # our field manager (runtimes/kubernetes/client.py FIELD_MANAGER)
OPERATOR_MANAGERS = ("dynamo-operator", "manager")  # kubebuilder's binary name, the default manager
PLANNER_CLIENT = "OpenAPI-Generator"
_SKIP_TOP = ("apiVersion", "kind", "metadata", "status")


@dataclass(frozen=True)
class Owner:
    manager: str
    operation: str  # Apply | Update
    subresource: str = ""

    @property
    def label(self) -> str:
        via = f" via /{self.subresource}" if self.subresource else ""
        return f"{self.manager} ({self.operation}{via})"


def owners(obj: dict | None) -> dict[Path, list[Owner]]:
    """Every owned leaf path of ``obj`` and its managers."""
    out: dict[Path, list[Owner]] = {}
    for entry in ((obj or {}).get("metadata") or {}).get("managedFields") or []:
        who = Owner(entry.get("manager", ""), entry.get("operation", "Update"), entry.get("subresource", ""))
        for path in _leaves_v1(entry.get("fieldsV1") or {}, ()):
            out.setdefault(path, []).append(who)
    return out


def _leaves_v1(node: dict, prefix: Path) -> list[Path]:
    found: list[Path] = []
    for seg, sub in node.items():
        if seg == ".":
            continue
        children = {k: v for k, v in (sub or {}).items() if k != "."}
        found.extend(_leaves_v1(children, (*prefix, seg)) if children else [(*prefix, seg)])
    return found


def owners_of(table: dict[Path, list[Owner]], path: Path) -> list[Owner]:
    """Managers of ``path`` or of anything inside it or containing it."""
    found: list[Owner] = []
    for owned, who in table.items():
        if owned[: len(path)] == path or path[: len(owned)] == owned:
            found.extend(w for w in who if w not in found)
    return found


# ------------------------------------------------------------------------------------ the schema


@cache
def _version_schema(api_version: str) -> dict[str, Any]:
    version = api_version.rpartition("/")[2]
    crd = load_crd()
    ver = next((v for v in crd["spec"]["versions"] if v["name"] == version), None)
    return ((ver or {}).get("schema") or {}).get("openAPIV3Schema") or {}


def _child(schema: dict | None, key: str) -> dict | None:
    if not schema:
        return None
    props = schema.get("properties") or {}
    if key in props:
        return props[key]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _map_keys(schema: dict | None) -> list[str] | None:
    if schema and schema.get("x-kubernetes-list-type") == "map":
        return schema.get("x-kubernetes-list-map-keys") or None
    return None


def _key_seg(item: dict, keys: list[str]) -> str:
    return "k:" + json.dumps({k: item.get(k) for k in keys}, sort_keys=True, separators=(",", ":"))


def leaves(value: Any, schema: dict | None, prefix: Path = ()) -> dict[Path, Any]:
    """The leaf paths of a value and what each holds."""
    if isinstance(value, dict) and value:
        out: dict[Path, Any] = {}
        for key, sub in value.items():
            out.update(leaves(sub, _child(schema, key), (*prefix, f"f:{key}")))
        return out
    keys = _map_keys(schema)
    if isinstance(value, list) and value and keys and all(isinstance(i, dict) for i in value):
        out = {}
        for item in value:
            out.update(leaves(item, (schema or {}).get("items"), (*prefix, _key_seg(item, keys))))
        return out
    return {prefix: value}


def spec_leaves(obj: dict) -> dict[Path, Any]:
    schema = _version_schema(obj.get("apiVersion", ""))
    return {p: v for key, sub in obj.items() if key not in _SKIP_TOP
            for p, v in leaves(sub, _child(schema, key), (f"f:{key}",)).items()}


def get_path(obj: Any, path: Path) -> Any:
    cur = obj
    for seg in path:
        if seg.startswith("f:") and isinstance(cur, dict) and seg[2:] in cur:
            cur = cur[seg[2:]]
        elif seg.startswith("k:") and isinstance(cur, list):
            want = json.loads(seg[2:])
            cur = next((i for i in cur if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items())),
                       MISSING)
            if cur is MISSING:
                return MISSING
        else:
            return MISSING
    return cur


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


MISSING = _Missing()


def dotted(path: Path) -> str:
    """``.spec.components[name="decode"].replicas``, as the API server prints a field."""
    text = ""
    for seg in path:
        if seg.startswith("k:"):
            keys = json.loads(seg[2:])
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(keys.items())) + "]"
        else:
            text += f".{seg[2:]}"
    return text


def replicas_path(api_version: str, component: str) -> Path:
    if api_version.endswith("v1alpha1"):
        return ("f:spec", "f:services", f"f:{component}", "f:replicas")
    return ("f:spec", "f:components", _key_seg({"name": component}, ["name"]), "f:replicas")


def component_spec(obj: dict | None, component: str) -> dict:
    spec = (obj or {}).get("spec") or {}
    if "services" in spec:
        return (spec.get("services") or {}).get(component) or {}
    return next((c for c in spec.get("components") or [] if c.get("name") == component), {})


def has_adapter(obj: dict | None, component: str) -> bool:
    adapter = component_spec(obj, component).get("scalingAdapter")
    if isinstance(adapter, dict) and "enabled" in adapter:  # v1alpha1 spelling
        return bool(adapter["enabled"])
    return adapter is not None


# ------------------------------------------------------------------------------------ autoscalers


def autoscalers(objects: list[dict], *, planner: bool) -> set[str]:
    """Managers that act as autoscalers on these objects (a DGD and its adapters)."""
    found = {e.get("manager", "") for obj in objects
             for e in ((obj or {}).get("metadata") or {}).get("managedFields") or []
             if e.get("subresource") == "scale"}
    if planner:
        found.add(PLANNER_CLIENT)
    return {m for m in found - {CONTROL_PLANE} if not is_person(m)}


def is_person(manager: str) -> bool:
    """kubectl's field managers (``kubectl``, ``kubectl-edit``, ``kubectl-scale``...) are people at a
    terminal, even when they write ``/scale``."""
    return manager == "kubectl" or manager.startswith("kubectl-")


def describe(manager: str, *, scalers: set[str], planner: bool) -> str:
    if manager == CONTROL_PLANE:
        return "the control plane"
    if manager in OPERATOR_MANAGERS:
        return "the Dynamo operator"
    if planner and manager == PLANNER_CLIENT:
        return "the Planner"
    if manager in scalers:
        return "an autoscaler"
    return manager


@dataclass
class Pool:
    """One pool's replicas as every party sees them."""

    service: str
    manifest: int | None  # the stored revision's
    adapter: int | None  # the DGDSA's spec.replicas (None: no adapter object)
    live: int | None  # the live DGD's
    ready: int | None  # status: ready replicas
    owner: str  # who holds the count now (manager name)
    owner_is: str  # in words: the control plane, the Planner, the Dynamo operator, an autoscaler, kubectl...
    via: str  # "adapter" when the count is the adapter's, "dgd" otherwise
    autoscaled: bool

    def as_dict(self) -> dict:
        return asdict(self)


def _latest_writer(owners_list: list[Owner], obj: dict | None) -> Owner | None:
    """The owner whose managedFields entry is the most recent (the last to set the field)."""
    if not owners_list:
        return None
    stamps = {(e.get("manager"), e.get("operation"), e.get("subresource", "")): e.get("time", "")
              for e in ((obj or {}).get("metadata") or {}).get("managedFields") or []}
    return max(owners_list, key=lambda o: (o.manager not in OPERATOR_MANAGERS,
                                           stamps.get((o.manager, o.operation, o.subresource), "")))


def pools(*, services: list[str], manifest: dict | None, live: dict | None, adapters: dict[str, dict],
          planner: bool) -> list[Pool]:
    """Per pool: the revision's, the adapter's and the live replicas, and who owns the count."""
    api_version = (live or manifest or {}).get("apiVersion", "")
    scalers = autoscalers([live or {}, *adapters.values()], planner=planner)
    status = (live or {}).get("status") or {}
    per = status.get("components") or status.get("services") or {}
    table = owners(live)
    out = []
    for service in services:
        adapter = adapters.get(service)
        dgd_owners = owners_of(table, replicas_path(api_version, service))
        if adapter is not None:
            adapter_owners = owners_of(owners(adapter), ("f:spec", "f:replicas"))
            writer, via = _latest_writer(adapter_owners, adapter), "adapter"
        else:
            writer, via = _latest_writer(dgd_owners, live), "dgd"
        manager = writer.manager if writer else ""
        out.append(Pool(
            service=service,
            manifest=component_spec(manifest, service).get("replicas"),
            adapter=((adapter or {}).get("spec") or {}).get("replicas") if adapter is not None else None,
            live=component_spec(live, service).get("replicas") if live else None,
            ready=(per.get(service) or {}).get("readyReplicas"),
            owner=manager, owner_is=describe(manager, scalers=scalers, planner=planner) if manager else "",
            via=via, autoscaled=manager in scalers,
        ))
    return out


# ------------------------------------------------------------------------------------ drift


@dataclass
class Difference:
    field: str
    revision: Any
    live: Any
    owners: list[str] = field(default_factory=list)
    why_ignored: str = ""

    def as_dict(self) -> dict:
        return {"field": self.field, "revision": _show(self.revision), "live": _show(self.live),
                "owners": self.owners, "why_ignored": self.why_ignored}


def _show(value: Any) -> Any:
    return None if value is MISSING else value


def drift(*, revision: dict, live: dict | None, adapters: dict[str, dict], planner: bool
          ) -> tuple[list[Difference], list[Difference]]:
    """(drift, ignored): every field the stored revision sets whose live value differs; those
    an autoscaler owns (see the module docstring) are set apart, with the reason."""
    if live is None:
        return [], []
    table = owners(live)
    scalers = autoscalers([live, *adapters.values()], planner=planner)
    api_version = live.get("apiVersion", "")
    adapter_fields = {replicas_path(api_version, name): name for name in _components(live)
                      if has_adapter(live, name)}
    shown, ignored = [], []
    for path, want in sorted(spec_leaves(revision).items()):
        have = get_path(live, path)
        if have == want or (_is_number(have) and _is_number(want) and float(have) == float(want)):
            continue
        who = owners_of(table, path)
        diff = Difference(dotted(path), want, have, [o.label for o in who])
        if path in adapter_fields:
            diff.why_ignored = f"owned by the scaling adapter of {adapter_fields[path]}"
        elif any(o.manager in scalers for o in who):
            names = sorted({describe(o.manager, scalers=scalers, planner=planner) for o in who
                            if o.manager in scalers})
            diff.why_ignored = "owned by " + ", ".join(names)
        (ignored if diff.why_ignored else shown).append(diff)
    return shown, ignored


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _components(obj: dict) -> list[str]:
    spec = obj.get("spec") or {}
    if "services" in spec:
        return list(spec.get("services") or {})
    return [c.get("name") for c in spec.get("components") or []]


# ------------------------------------------------------------------------------------ apply


def foreign_fields(body: dict, live: dict | None, *, differing: bool = True
                   ) -> list[tuple[Path, Any, Any, list[Owner]]]:
    """Fields ``body`` sets that another manager owns on ``live``: (path, ours, theirs, their owners).
    With ``differing`` only those whose live value is not ours (what a forced apply takes);
    without, every one of them (what a plain apply leaves out)."""
    if live is None:
        return []
    table = owners(live)
    found = []
    for path, ours in spec_leaves(body).items():
        theirs = get_path(live, path)
        if theirs is MISSING or (differing and theirs == ours):
            continue
        others = [o for o in owners_of(table, path) if o.manager != CONTROL_PLANE]
        if others:
            found.append((path, ours, theirs, others))
    return found


def leave_out(body: dict, path: Path) -> bool:
    """Drop ``path`` from an apply configuration, so that the apply neither sets nor co-owns it.
    The key fields of a list-map item stay (they name the item, which we still apply); an object
    left empty by the removal goes too. False when ``path`` is a key field, which is kept."""
    *parents, last = path
    if parents and parents[-1].startswith("k:") and last.startswith("f:") \
            and last[2:] in json.loads(parents[-1][2:]):
        return False
    parent = get_path(body, tuple(parents))
    if not (isinstance(parent, dict) and last.startswith("f:")):
        return False
    parent.pop(last[2:], None)
    for cut in range(len(parents), 0, -1):
        holder, seg = get_path(body, tuple(parents[: cut - 1])), parents[cut - 1]
        value = get_path(body, tuple(parents[:cut]))
        if value != {} or not (isinstance(holder, dict) and seg.startswith("f:")):
            break
        holder.pop(seg[2:], None)
    return True
