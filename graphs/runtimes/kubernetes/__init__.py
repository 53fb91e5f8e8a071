"""The Kubernetes runtime: the client adapter (client.py), the runtime (runtime.py), the
watchers (watch.py) and the translation of what they see (status.py)."""
