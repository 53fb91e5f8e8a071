"""What a ready worker pod really runs with, beyond its spec: the KV-transfer backend its log
names (read from the head of the log), and, where an admin allows ``pods/exec``, the size of
/dev/shm that ``df`` sees inside its main container. Each is read once per container start."""

from __future__ import annotations

from django.conf import settings

from clusters.kubernetes import KubeClient, KubeFailure, exec_shm_bytes, read_log_head

from ..base import LOG_HEAD_BYTES, PodStatus, nixl_backend

MAX_MEMO = 10_000  # forgetting them only costs a re-read


class WorkerFacts:
    def __init__(self) -> None:
        self.nixl: dict[tuple[str, int], str] = {}  # (pod, restarts) -> backend ("" while unnamed)
        self.shm: dict[tuple[str, int], tuple[int | None, str]] = {}  # (pod, restarts) -> df reading

    def observe(self, kube: KubeClient, namespace: str, pod: PodStatus, engine: str) -> None:
        pod.nixl_backend = self.backend(kube, namespace, pod, engine)
        if settings.KUBERNETES_EXEC_SHM:
            self.df_shm(kube, namespace, pod)

    def backend(self, kube: KubeClient, namespace: str, pod: PodStatus, engine: str) -> str:
        """The worker's KV-transfer backend; read again while the log names none yet."""
        if engine == "mocker":
            return nixl_backend("mocker", "")
        key = (pod.name, pod.restarts)
        if not self.nixl.get(key):
            if len(self.nixl) > MAX_MEMO:
                self.nixl.clear()
            try:
                self.nixl[key] = nixl_backend(engine, read_log_head(kube, namespace, pod.name, LOG_HEAD_BYTES))
            except KubeFailure:
                self.nixl[key] = ""
        return self.nixl[key]

    def df_shm(self, kube: KubeClient, namespace: str, pod: PodStatus) -> None:
        """/dev/shm from ``df`` in the container, over what the pod's volumes say; a refusal
        is noted next to the volumes' figure."""
        key = (pod.name, pod.restarts)
        if key not in self.shm:
            if len(self.shm) > MAX_MEMO:
                self.shm.clear()
            try:
                self.shm[key] = (exec_shm_bytes(kube, namespace, pod.name), "df in the container")
            except KubeFailure as exc:
                why = "pods/exec not allowed" if exc.status == 403 else str(exc).split(": ", 1)[-1][:80]
                self.shm[key] = (None, f"{pod.shm_source} (df: {why})")
        measured, source = self.shm[key]
        if measured is not None:
            pod.shm_bytes = measured
        pod.shm_source = source
