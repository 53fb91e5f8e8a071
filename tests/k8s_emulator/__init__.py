"""A faithful, in-process Kubernetes API server for the tests (never imported by product code).

Usage::

    with KubeEmulator() as kube:                     # DGD + DGDSA CRDs from graphs/crds
        api = client.CustomObjectsApi(kube.api_client())
        api.create_namespaced_custom_object("nvidia.com", "v1beta1", "default",
                                            "dynamographdeployments", manifest)
        assert kube.find_requests("POST", r"/dynamographdeployments$")

Modules: ``server`` (HTTP, routing, discovery, faults, recording), ``api`` (reads, watch, /scale,
/log), ``writes`` (create/replace/patch/apply/delete pipeline), ``apply`` (managedFields and
server-side apply), ``patches`` (merge/strategic/JSON patch), ``schema`` (CRD structural schemas:
pruning, defaulting, validation), ``selectors``, ``store`` (resourceVersion, watch history),
``conversion`` (v1alpha1 <-> v1beta1 hooks), ``resources`` (resource table, discovery),
``fixtures`` (pods, events, nodes), ``operator`` (the opt-in fake Dynamo operator).
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
