"""The Dynamo operator's DynamoGraphDeploymentRequest controller (nvidia.com/v1beta1), emulated
(part of the fake operator: ``simulate_operator = True``, and the DGDR CRD served).

It follows ``deploy/operator/internal/controller/dynamographdeploymentrequest_controller.go`` of
ai-dynamo/dynamo at commit 0157f1726fa66f0d3cf3c695d31477578524ba2a (the v1beta1 phase machine):

* ``Pending`` with ``observedGeneration`` 0: validate (``searchStrategy: thorough`` with
  ``backend: auto`` is refused; GPU hardware must be given or discoverable), record the
  generation, condition ``Profiling=False`` reason ``DiscoveringHardware``; then create the
  profiling Job ``profile-<name>`` (labels ``app``/``dgdr``/``managed-by``, the profiler
  container running ``python -m dynamo.profiler --config <spec JSON> --output-dir /data`` and the
  ``output-copier`` sidecar), delete a stale ``dgdr-output-<name>`` ConfigMap first, set
  ``status.profilingJobName``, phase ``Profiling`` with ``profilingPhase: Initializing``;
* ``Profiling``: the Job's ``Complete`` condition finishes it, ``Failed`` fails the DGDR with
  ``profiling job failed: <the condition's message>`` (reason ``ProfilingFailed``). On success the
  DGD is read from ``dgdr-output-<name>`` key ``final_config.yaml`` (multi-document: the first
  DynamoGraphDeployment; a missing map or key fails with ``GenerationFailed``), stored in the
  annotation ``nvidia.com/generated-dgd-spec`` and ``status.profilingResults.selectedConfig``,
  ``status.dgdName`` set; then ``Deploying`` when ``autoApply`` (default true), else ``Ready``;
* ``Deploying``: with ``status.dgdName`` empty the DGD is created (labels ``dgdr.nvidia.com/name``,
  ``dgdr.nvidia.com/namespace``, ``nvidia.com/managed-by``; no owner reference); else the DGD is
  read: missing, the DGDR fails (``DeploymentDeleted``); ``state: successful`` makes it
  ``Deployed``. As the source stands at that commit, ``generateDGDSpec`` has already set
  ``status.dgdName``, so an auto-applied DGDR reaches the DGD-missing branch: emulated as is.
* ``Ready``, ``Failed``: nothing to do. A spec change after profiling started is ignored.

The profiler itself is not emulated: what its pod does (write ``dgdr-output-<name>`` and end the
Job) a test does with :meth:`finish_profiling` / :meth:`fail_profiling`."""

from __future__ import annotations

import json
from typing import Any

import yaml

from .fixtures import now

DGDR = ("nvidia.com", "dynamographdeploymentrequests")
JOB = ("batch", "jobs")
CONFIGMAP = ("", "configmaps")
DGD = ("nvidia.com", "dynamographdeployments")
MANAGER = "dynamo-operator"
GENERATED = "nvidia.com/generated-dgd-spec"
OUTPUT_FILE = "final_config.yaml"


def job_name(dgdr: str) -> str:
    return f"profile-{dgdr}"


def output_configmap(dgdr: str) -> str:
    return f"dgdr-output-{dgdr}"


def _condition(status: dict[str, Any], ctype: str, value: str, reason: str, message: str, generation: int) -> None:
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != ctype]
    conditions.append({"type": ctype, "status": value, "reason": reason, "message": message,
                       "observedGeneration": generation, "lastTransitionTime": now()})
    status["conditions"] = conditions


_SUCCEEDED = {"Pending": ("False", "Pending", "DGDR is pending"),
              "Profiling": ("False", "Profiling", "Profiling is in progress"),
              "Ready": ("True", "SpecGenerated", "Profiling complete, spec available"),
              "Deploying": ("False", "Deploying", "Deployment is in progress"),
              "Deployed": ("True", "Deployed", "Deployment is healthy"),
              "Failed": ("False", "Failed", "DGDR has failed")}


class DgdrController:
    def __init__(self, emu: Any):
        self.emu = emu
        self.queue: list[tuple[str, str]] = []
        self.busy = False

    def on_change(self, key: tuple[str, str], obj: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
        current = obj or old or {}
        meta = current.get("metadata") or {}
        labels = meta.get("labels") or {}
        if key == DGDR and obj is not None:
            self.reconcile(meta.get("namespace", ""), meta["name"])
        elif key == JOB and old is not None and labels.get("dgdr"):  # Owns(Job): updates and deletes only
            self.reconcile(meta.get("namespace", ""), labels["dgdr"])
        elif key == DGD and old is not None and labels.get("dgdr.nvidia.com/name"):
            self.reconcile(labels.get("dgdr.nvidia.com/namespace", ""), labels["dgdr.nvidia.com/name"])

    # -- the phase machine --------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> None:
        """Queued: the controller's own writes trigger it again, as watch events would."""
        if (namespace, name) not in self.queue:
            self.queue.append((namespace, name))
        if self.busy:
            return
        self.busy = True
        try:
            while self.queue:
                self._reconcile(*self.queue.pop(0))
        finally:
            self.busy = False

    def _reconcile(self, namespace: str, name: str) -> None:
        for _ in range(8):  # the controller requeues after each phase write
            dgdr = self.emu.store.get(DGDR, namespace, name)
            if dgdr is None or dgdr["metadata"].get("deletionTimestamp"):
                return
            status = dict(dgdr.get("status") or {})
            generation = int(dgdr["metadata"].get("generation", 1))
            observed = int(status.get("observedGeneration") or 0)
            phase = status.get("phase") or "Pending"
            if observed and observed != generation and phase in ("Profiling", "Deploying", "Ready", "Deployed"):
                return  # MessageSpecChangeRejected: the old spec stays in force
            step = {"Pending": self._pending, "Profiling": self._profiling, "Deploying": self._deploying}.get(phase)
            if step is None or not step(dgdr, status, generation):
                return

    def _write(self, dgdr: dict[str, Any], status: dict[str, Any], phase: str, generation: int,
               condition: tuple[str, str, str, str] | None = None) -> bool:
        status["phase"] = phase
        value, reason, message = _SUCCEEDED[phase]
        _condition(status, "Succeeded", value, reason, message, generation)
        if condition is not None:
            _condition(status, *condition, generation)
        ns = dgdr["metadata"].get("namespace")
        self.emu.set_status("dynamographdeploymentrequests", dgdr["metadata"]["name"], status, namespace=ns,
                            manager=MANAGER)
        return True

    def _pending(self, dgdr: dict[str, Any], status: dict[str, Any], generation: int) -> bool:
        spec, meta = dgdr.get("spec") or {}, dgdr["metadata"]
        if not status.get("observedGeneration"):
            error = self._validate(spec)
            if error:
                self._write(dgdr, status, "Failed", generation, ("Validation", "False", "ValidationFailed", error))
                return False
            status["observedGeneration"] = generation
            return self._write(dgdr, status, "Pending", generation,
                               ("Profiling", "False", "DiscoveringHardware",
                                "Discovering GPU hardware and preparing profiling job"))
        ns = meta.get("namespace")
        if not spec.get("image"):
            self._write(dgdr, status, "Failed", generation, (
                "Profiling", "False", "JobCreationFailed", "spec.image is required but not set; ensure the "
                "defaulting webhook ran or set spec.image explicitly"))
            return False
        if self.emu.store.get(CONFIGMAP, ns, output_configmap(meta["name"])) is not None:
            self.emu.delete_object("configmaps", output_configmap(meta["name"]), namespace=ns)
        owner = {"apiVersion": dgdr["apiVersion"], "kind": dgdr["kind"], "name": meta["name"],
                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}
        if self.emu.store.get(JOB, ns, job_name(meta["name"])) is None:
            self.emu.put({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
                "name": job_name(meta["name"]), "namespace": ns, "ownerReferences": [owner],
                "labels": {"app": "dynamo-profiler", "dgdr": meta["name"], "nvidia.com/managed-by": MANAGER}},
                "spec": {"backoffLimit": 3, "template": {"spec": {
                    "serviceAccountName": "dgdr-profiling-job", "restartPolicy": "Never",
                    "containers": [
                        {"name": "profiler", "image": spec["image"], "command": ["python", "-m", "dynamo.profiler"],
                         "args": ["--config", json.dumps(spec), "--output-dir", "/data"], "workingDir": "/workspace"},
                        {"name": "output-copier", "image": "bitnami/kubectl:latest", "command": ["/bin/sh", "-c"]}],
                }}}, "status": {}})
        status["profilingJobName"] = job_name(meta["name"])
        status["profilingPhase"] = "Initializing"
        return self._write(dgdr, status, "Profiling", generation, (
            "Profiling", "False", "DiscoveringHardware", "Discovering GPU hardware and preparing profiling job"))

    def _validate(self, spec: dict[str, Any]) -> str:
        if spec.get("searchStrategy") == "thorough" and spec.get("backend", "auto") == "auto":
            return ('spec.searchStrategy "thorough" is incompatible with spec.backend "auto": set spec.backend to '
                    "a specific backend (sglang, trtllm, or vllm)")
        hardware = spec.get("hardware") or {}
        gpu_nodes = [n for n in self.emu.list_objects("nodes")
                     if ((n.get("status") or {}).get("capacity") or {}).get("nvidia.com/gpu")]
        if not (hardware.get("gpuSku") or hardware.get("vramMb") or hardware.get("numGpusPerNode")) and not gpu_nodes:
            return ("GPU hardware info required but auto-discovery failed. Add spec.hardware.gpuSku, "
                    "spec.hardware.vramMb, spec.hardware.numGpusPerNode")
        return ""

    def _profiling(self, dgdr: dict[str, Any], status: dict[str, Any], generation: int) -> bool:
        meta = dgdr["metadata"]
        ns, name = meta.get("namespace"), meta["name"]
        job = self.emu.store.get(JOB, ns, job_name(name))
        conditions = ((job or {}).get("status") or {}).get("conditions") or []
        failed = next((c for c in conditions if c.get("type") == "Failed" and c.get("status") == "True"), None)
        complete = any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)
        if job is None or failed is not None:
            status.pop("profilingPhase", None)
            message = (f"profiling job failed: {failed.get('message', '')}" if failed
                       else f'jobs.batch "{job_name(name)}" not found')
            return self._write(dgdr, status, "Failed", generation, ("Profiling", "False", "ProfilingFailed", message))
        if not complete:
            cond = next((c for c in status.get("conditions") or [] if c.get("type") == "Profiling"), {})
            if cond.get("reason") == "DiscoveringHardware":
                self._write(dgdr, status, "Profiling", generation,
                            ("Profiling", "False", "ProfilingRunning", "Profiling is in progress"))
            return False
        status.pop("profilingPhase", None)
        _condition(status, "Profiling", "True", "ProfilingCompleted", "Profiling job completed successfully",
                   generation)
        cm = self.emu.store.get(CONFIGMAP, ns, output_configmap(name))
        text = ((cm or {}).get("data") or {}).get(OUTPUT_FILE)
        dgd = next((d for d in yaml.safe_load_all(text or "") if isinstance(d, dict)
                    and d.get("kind") == "DynamoGraphDeployment"), None)
        if dgd is None:
            message = (f"output ConfigMap {output_configmap(name)} not found - profiling may not have completed yet"
                       if cm is None else f"failed to extract DGD from {OUTPUT_FILE}: no DynamoGraphDeployment found"
                       " in YAML content" if text else f"key {OUTPUT_FILE} not found in ConfigMap "
                       f"{output_configmap(name)}")
            return self._write(dgdr, status, "Failed", generation, ("SpecGenerated", "False", "GenerationFailed",
                                                                   message))
        annotated = {**dgdr, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}),
                                                                   GENERATED: yaml.safe_dump(dgd, sort_keys=False)}}}
        self.emu.internal_write(DGDR, "v1beta1", annotated, manager=MANAGER)
        dgdr = self.emu.store.get(DGDR, ns, name)
        status["dgdName"] = dgd["metadata"]["name"]
        status["profilingResults"] = {**(status.get("profilingResults") or {}), "selectedConfig": dgd}
        if (dgdr.get("spec") or {}).get("autoApply", True):
            return self._write(dgdr, status, "Deploying", generation, (
                "SpecGenerated", "True", "SpecGenerated", "DynamoGraphDeployment spec generated successfully"))
        return self._write(dgdr, status, "Ready", generation, (
            "SpecGenerated", "True", "SpecGenerated",
            "Generated spec is available in annotation nvidia.com/generated-dgd-spec"))

    def _deploying(self, dgdr: dict[str, Any], status: dict[str, Any], generation: int) -> bool:
        meta = dgdr["metadata"]
        ns = meta.get("namespace")
        if not status.get("dgdName"):
            generated = yaml.safe_load((meta.get("annotations") or {}).get(GENERATED) or "null") or {}
            gmeta = generated.get("metadata") or {}
            labels = {**(gmeta.get("labels") or {}), "dgdr.nvidia.com/name": meta["name"],
                      "dgdr.nvidia.com/namespace": ns, "nvidia.com/managed-by": MANAGER}
            body = {"apiVersion": generated.get("apiVersion", "nvidia.com/v1alpha1"),
                    "kind": "DynamoGraphDeployment", "spec": generated.get("spec") or {},
                    "metadata": {"name": gmeta.get("name"), "namespace": ns, "labels": labels,
                                 "annotations": dict(gmeta.get("annotations") or {})}}
            version = body["apiVersion"].rpartition("/")[2]
            if self.emu.store.get(DGD, ns, gmeta.get("name")) is None:
                self.emu.internal_write(DGD, version, body, manager=MANAGER)
            status["dgdName"] = gmeta.get("name")
            _condition(status, "DeploymentReady", "False", "DeploymentCreated",
                       f"DGD {gmeta.get('name')} created, waiting for Ready", generation)
            return self._write(dgdr, status, "Deploying", generation)
        dgd = self.emu.store.get(DGD, ns, status["dgdName"])
        if dgd is None:
            status.pop("dgdName")
            status.pop("deploymentInfo", None)
            self._write(dgdr, status, "Failed", generation, (
                "DeploymentReady", "False", "DeploymentDeleted",
                "Deployment was deleted by user. Create a new DGDR to redeploy."))
            return False
        state = (dgd.get("status") or {}).get("state", "")
        if state == "successful":
            return self._write(dgdr, status, "Deployed", generation, (
                "DeploymentReady", "True", "DeploymentReady",
                f"DynamoGraphDeployment {dgd['metadata']['name']} is ready"))
        self._write(dgdr, status, "Deploying", generation, (
            "DeploymentReady", "False", "DeploymentInProgress", f"DGD {dgd['metadata']['name']} is in {state} state"))
        return False

    # -- what the profiling Job's pod does ------------------------------------------------------------
    def finish_profiling(self, name: str, namespace: str, final_config: str) -> None:
        """The profiler wrote ``final_config.yaml``; the sidecar copied it to the output ConfigMap;
        the Job completed."""
        self.emu.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": output_configmap(name), "namespace": namespace,
            "labels": {"dgdr.nvidia.com/name": name, "nvidia.com/managed-by": MANAGER}},
            "data": {OUTPUT_FILE: final_config}})
        self._end_job(name, namespace, "Complete", "")

    def fail_profiling(self, name: str, namespace: str, message: str) -> None:
        self._end_job(name, namespace, "Failed", message)

    def _end_job(self, name: str, namespace: str, ctype: str, message: str) -> None:
        status = {"conditions": [{"type": ctype, "status": "True", "reason": "BackoffLimitExceeded"
                                  if ctype == "Failed" else "Completed", "message": message,
                                  "lastTransitionTime": now()}]}
        self.emu.set_status("jobs", job_name(name), status, namespace=namespace, manager="job-controller")
