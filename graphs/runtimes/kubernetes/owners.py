"""The ownership part of the status cache of a Kubernetes graph, written by the watchers
(watch.py) after every change they see:

* ``Deployment.ownership``: per pool the revision's, the adapter's and the live replicas and who
  owns the count (from ``managedFields``), and the drift between the stored revision and the live
  DGD with autoscaler-owned fields set apart (core/dgd/ownership.py decides);
* a ``ReplicaChange`` row each time a pool's desired count moves and the writer is not the
  control plane: the Planner's decisions (its field manager on the adapter's replicas through
  ``/scale``), an HPA's, a person's with kubectl: ``at``, ``service``, ``before`` -> ``after``,
  ``manager``, ``actor`` (in words), ``via`` (``adapter`` or ``dgd``);
* for the Planner timeline (graphs/planner_decisions.py): each change the Planner made as an
  observed decision (source ``kubernetes-watch``), and every pool's desired and ready replicas.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from core.dgd import ownership
from core.dgd.gitops import gitops_owner

from ... import planner_decisions as planner_services
from ...models import Deployment, ReplicaChange
from ...status_version import moved
from .observe import parse_time

MAX_DRIFT = 200  # fields listed per graph; the count says how many there were


def record_ownership(dep: Deployment, dgd: dict | None, adapters: dict[str, dict]) -> None:
    spec = dep.revision.graph_spec if dep.revision else None
    if spec is None or dgd is None:
        return
    planner = any(s.role == "planner" for s in spec.services)
    names = [s.name for s in spec.services]
    pools = ownership.pools(services=names, manifest=dep.manifest, live=dgd, adapters=adapters, planner=planner)
    shown, ignored = ownership.drift(revision=dep.manifest or {}, live=dgd, adapters=adapters, planner=planner)
    previous = {p.get("service"): p for p in (dep.ownership or {}).get("pools") or []}
    for pool in pools:
        _record_change(dep, previous.get(pool.service), pool, dgd, adapters.get(pool.service))
    counts = {p.service: (_count(p), p.ready or 0) for p in pools if _count(p) is not None}
    if counts:
        planner_services.replicas_observe(graph=dep.graph, pools=counts)
    view = {"pools": [p.as_dict() for p in pools],
            "drift": [d.as_dict() for d in shown[:MAX_DRIFT]], "drift_count": len(shown),
            "ignored": [d.as_dict() for d in ignored[:MAX_DRIFT]], "ignored_count": len(ignored),
            "generation": (dgd.get("metadata") or {}).get("generation"),
            # Argo CD or Flux applies this DGD from Git: apply then means commit (graphs.operations).
            "gitops": gitops_owner(dgd)}
    if view != dep.ownership:
        Deployment.objects.filter(pk=dep.pk).update(ownership=view)
        dep.ownership = view
        moved(dep.graph_id)


def _count(pool: dict | ownership.Pool | None) -> int | None:
    if pool is None:
        return None
    get = pool.get if isinstance(pool, dict) else lambda k: getattr(pool, k)
    return get("adapter") if get("via") == "adapter" else get("live")


def _record_change(dep: Deployment, before: dict | None, pool: ownership.Pool, dgd: dict,
                   adapter: dict | None) -> None:
    """A ReplicaChange when the pool's desired count moved since the last view and someone else
    than the control plane wrote it (our own scales are operations already)."""
    old, new = _count(before), _count(pool)
    if before is None or new is None or old == new or pool.owner in ("", ownership.CONTROL_PLANE):
        return
    source = adapter if pool.via == "adapter" else dgd
    at = _written_at(source, pool.owner) or timezone.now()
    ReplicaChange.objects.create(graph_id=dep.graph_id, at=at, service=pool.service, before=old, after=new,
                                 manager=pool.owner[:128], actor=pool.owner_is[:40], via=pool.via)
    moved(dep.graph_id)
    if pool.owner_is == "the Planner":
        where = "the /scale of its scaling adapter" if pool.via == "adapter" else "the DGD"
        planner_services.decision_record(
            graph=dep.graph, source=planner_services.SOURCE_KUBERNETES, desired={pool.service: new},
            before={pool.service: old} if old is not None else {}, actor=pool.owner, at=at,
            reason=f"the Planner ({pool.owner}) set {pool.service} to {new} through {where}")


def _written_at(obj: dict | None, manager: str) -> dt.datetime | None:
    stamps = [parse_time(e.get("time")) for e in ((obj or {}).get("metadata") or {}).get("managedFields") or []
              if e.get("manager") == manager]
    stamps = [s for s in stamps if s is not None]
    return max(stamps) if stamps else None
