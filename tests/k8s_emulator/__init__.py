"""A faithful, in-process Kubernetes API server for the tests (never imported by product code).

Usage::

    with KubeEmulator() as kube:                     # DGD + DGDSA CRDs from core/crds
        api = client.CustomObjectsApi(kube.api_client())          # retries off by default
        api.create_namespaced_custom_object("nvidia.com", "v1beta1", "default",
                                            "dynamographdeployments", manifest)
        assert kube.find_requests("POST", r"/dynamographdeployments$")

``kube.write_kubeconfig(path)`` serves code that calls ``config.load_kube_config``.
Namespaces default, kube-system, kube-public and kube-node-lease exist; creating in another one is
404 as on a real cluster unless it is created first (``add_namespace``, ``create_namespace``) or
``auto_create_namespaces=True``. Seeding helpers (``set_pod``, ``add_event``, ``put``...) create
missing namespaces silently.

Fidelity notes (what is knowingly approximate):
* Objects are stored in the version they were last written in and converted on read/list/watch
  through the other version (``conversion.py``); the real cluster stores v1beta1 and calls the
  operator's webhook. Same-version round trips are exact; cross-version ones are close.
* Server-side apply: the emulator's own structured-merge-diff (``smd/``, from upstream's rules) on
  the CRD schema; core kinds have no schema, so their lists are atomic (the deduced type); fields
  defaulted after the merge are nobody's; conflicts and ``time`` as apimachinery's field manager
  (``apply.py``). A manager whose entry is in another version is compared after conversion.
* Strategic merge patch on core kinds merges lists of objects by ``name``/``type``/... and
  ignores ``$patch`` directives.
* List ``continue`` reads the current state after the last key (no snapshot); a token older than
  ``expire_history()`` gives 410. ``resourceVersion``/``resourceVersionMatch`` on list are ignored.
* Not evaluated: CEL ``x-kubernetes-validations``, ``format`` (int32 ranges, date-time; ``/scale``
  does refuse counts beyond int32), core-kind schemas (pods, events... are stored as sent).
  Pod/namespace deletion is immediate (no grace period, no Terminating phase); garbage
  collection follows ownerReferences synchronously.
* Watches: ``timeoutSeconds`` ends the stream cleanly (default 1800 s); BOOKMARKs when
  ``allowWatchBookmarks`` (at the end, and every ``bookmark_interval`` s); ``end_watches()``
  closes all streams. No ``Table``/protobuf output (except ``/openapi/v2``), no aggregated discovery.
* ``/openapi/v3`` and ``/openapi/v2`` (protobuf for kubectl) are built from the installed CRDs
  (``openapi.py``, ``openapi_pb.py``): kubectl applies without ``--validate=false``.
* Identity: bearer tokens map to usernames (``add_user``); others are ``kubernetes-admin``. The
  fake operator's webhook (``webhook.py``) exempts callers by username, as the real one.
* The fake operator (``simulate_operator = True``) runs synchronously inside the write.

Modules: ``server`` (HTTP, routing, discovery, faults, recording), ``api`` (reads, watch, /scale,
/log), ``writes`` (create/replace/patch/apply/delete pipeline), ``apply`` (managedFields and
server-side apply), ``patches`` (merge/strategic/JSON patch), ``schema`` (CRD structural schemas:
pruning, defaulting, validation), ``selectors``, ``store`` (resourceVersion, watch history),
``conversion`` (v1alpha1 <-> v1beta1 hooks), ``resources`` (resource table, discovery),
``fixtures`` (pods, events, nodes), ``operator`` (the opt-in fake Dynamo operator), ``webhook`` (its
validating webhook), ``openapi``/``openapi_pb`` (the OpenAPI documents).
"""

from .emulator import KubeEmulator
from .errors import ApiError
from .fixtures import UNSCHEDULABLE_MESSAGE, build_event, build_node, build_pod, dynamo_labels
from .server import Fault, RecordedRequest

__all__ = [
    "UNSCHEDULABLE_MESSAGE",
    "ApiError",
    "Fault",
    "KubeEmulator",
    "RecordedRequest",
    "build_event",
    "build_node",
    "build_pod",
    "dynamo_labels",
]
