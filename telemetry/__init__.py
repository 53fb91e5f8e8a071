"""The control plane's own Prometheus metrics, served at ``/metrics`` (exposition.py).

instruments.py holds what processes record as they work (the playground's latencies, streams in
flight, Prometheus queries), multiprocess-safe: every process writes its own files under
METRICS_MULTIPROC_DIR and a scrape sums them. scrape.py reads the rest at scrape time, so that it
is the same whichever process or pod answers: the broker's queue depth, and what the apps that
own the state register (graphs: operations and the status cache; clusters: watch lag).
Bottom layer: anything may import it; it imports no app."""
