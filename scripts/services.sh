#!/usr/bin/env bash
# Start what the test suite needs on this machine when it is not running: PostgreSQL and
# Redis (installed from Debian's packages), and Debian's Chromium for the browser tests.
set -euo pipefail

if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 30); do redis-cli ping >/dev/null 2>&1 && break; sleep 1; done
fi
# Browser tests drive Debian's Chromium (Playwright's own browser download does not work here).
if ! command -v chromium >/dev/null 2>&1; then
  echo "installing Debian's chromium"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "could not install chromium: browser tests will fail" >&2
fi
# Local graphs' latency charts come from Debian's Prometheus (prometheus and promtool).
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  echo "installing Debian's prometheus"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null) \
    || echo "could not install prometheus: the metrics tests will fail" >&2
fi
# tests/test_deploy.py renders deploy/kustomize with `kubectl kustomize`: any kubectl >= 1.20 will
# do (the manifests stay within the kustomize 2.0.3 that Debian's kubectl 1.20 embeds).
if ! command -v kubectl >/dev/null 2>&1; then
  echo "installing Debian's kubernetes-client (kubectl)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null) \
    || echo "could not install kubectl: tests/test_deploy.py will fail" >&2
fi
# Dynamo 1.6.1's Planner virtual connector keeps its decisions in etcd (graphs/runtimes/local/planner.py
# runs one on loopback per graph with a Planner): Debian's etcd-server.
if ! command -v etcd >/dev/null 2>&1; then
  echo "installing Debian's etcd-server"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null) \
    || echo "could not install etcd: tests/test_planner_local.py will fail" >&2
fi
exit 0
