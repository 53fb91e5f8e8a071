"""Fixtures for the Kubernetes runtime tests: the API emulator over real HTTP with the fake
Dynamo operator, and a registered cluster reaching it through a kubeconfig (so the product's
own connection code runs). Helpers to build graphs and run operations: tests/k8s_helpers.py.

Use from a test module with ``pytest_plugins = ["tests.k8s_fixtures"]`` (and do not import
this module: pytest rewrites its asserts only when it loads it as a plugin)."""

from __future__ import annotations

import pytest

from tests.k8s_emulator import KubeEmulator
from tests.k8s_helpers import CLUSTER, EMULATORS, NS


@pytest.fixture
def kube():
    """A started emulator with the fake Dynamo operator, namespaces default and llm."""
    with KubeEmulator(simulate_operator=True) as emulator:
        emulator.add_namespace(NS)
        EMULATORS.append(emulator)
        try:
            yield emulator
        finally:
            EMULATORS.remove(emulator)
    assert not emulator.errors, emulator.errors


@pytest.fixture
def fast_retries(settings):
    """Back-off in tens of milliseconds, so retry tests take no time; still 3 attempts."""
    settings.KUBERNETES_RETRIES = 3
    settings.KUBERNETES_RETRY_BACKOFF = 0.02
    settings.KUBERNETES_RETRY_MAX_DELAY = 0.1
    settings.KUBERNETES_CONNECT_TIMEOUT = 2
    settings.KUBERNETES_READ_TIMEOUT = 5


@pytest.fixture
def cluster(db, kube, tmp_path, fast_retries):
    """Cluster ``emu`` registered with a kubeconfig file and context, allowing default and llm."""
    from clusters.models import Cluster

    path = kube.write_kubeconfig(tmp_path / "kubeconfig", context="emulator")
    return Cluster.objects.create(name=CLUSTER, kubeconfig=str(path), context="emulator",
                                  namespaces=["default", NS])
