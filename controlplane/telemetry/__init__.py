"""The control plane's own Prometheus metrics, served at ``/metrics`` (see exposition.py).

instruments.py holds what processes record as they work (the playground's latencies, streams
in flight, Prometheus queries), multiprocess-safe: every process writes its own files under
METRICS_MULTIPROC_DIR and a scrape sums them. collector.py reads the rest at scrape time from
the database and the broker (operations, queue depth, watch lag, status-cache age), so that
it is the same whichever process or pod answers."""
