"""The control plane's own metrics: the instruments every process records into (prometheus-client in
multiprocess mode). Bottom layer: anything may import it; it imports only Django settings."""
