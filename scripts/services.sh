#!/usr/bin/env bash
# Provision what the product and its tests need on this machine, saying what it does:
#
#   scripts/services.sh prometheus   Prometheus only: what `make up` needs for latency charts
#   scripts/services.sh              everything the test suite needs (`make test`): PostgreSQL and
#                                    Redis (started), Chromium and kubectl (Debian packages), Prometheus
#
# Prometheus comes from Debian's package, unpacked into a prefix that needs no root:
# $CONTROLPLANE_TOOLS_DIR (default var/tools), where metrics/localprom.py looks after PATH. A
# prometheus already on PATH is used as is.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS_DIR="${CONTROLPLANE_TOOLS_DIR:-$ROOT/var/tools}"
WHAT="${1:-all}"

say() { echo "services: $*"; }

apt_fetch() {  # apt_fetch PACKAGE DIR: download a Debian package's .deb into DIR, without root
  local package="$1" dir="$2"
  (cd "$dir" && apt-get download -qq "$package" 2>/dev/null) && return 0
  if [ "$(id -u)" = 0 ]; then  # no package lists yet (a fresh container): fetch them once
    say "refreshing the apt package lists"
    apt-get update -qq && (cd "$dir" && apt-get download -qq "$package" 2>/dev/null) && return 0
  fi
  return 1
}

tool_path() {  # where a tool is: on PATH, else in the prefix; nothing when neither
  command -v "$1" 2>/dev/null || { [ -x "$TOOLS_DIR/usr/bin/$1" ] && echo "$TOOLS_DIR/usr/bin/$1"; } || true
}

ensure_prometheus() {
  local prometheus promtool
  prometheus="$(tool_path prometheus)"
  promtool="$(tool_path promtool)"
  if [ -n "$prometheus" ] && [ -n "$promtool" ]; then
    say "prometheus: $prometheus"
    say "promtool: $promtool"
    return 0
  fi
  say "installing Debian's prometheus into $TOOLS_DIR (for the latency charts of local graphs)"
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    say "cannot install prometheus: this is not a Debian/Ubuntu system; install Prometheus and set" \
        "PROMETHEUS_BINARY to its path (charts say 'Prometheus is unreachable' until then)" >&2
    return 1
  fi
  local tmp
  tmp="$(mktemp -d)"
  chmod 755 "$tmp"  # apt downloads as the _apt user where it can
  if ! apt_fetch prometheus "$tmp"; then
    rm -rf "$tmp"
    say "could not download Debian's prometheus package (is a Debian mirror reachable?)" >&2
    return 1
  fi
  mkdir -p "$TOOLS_DIR"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$TOOLS_DIR"
  rm -rf "$tmp"
  say "installed $("$TOOLS_DIR/usr/bin/prometheus" --version 2>&1 | head -n1)"
  say "prometheus: $TOOLS_DIR/usr/bin/prometheus, promtool: $TOOLS_DIR/usr/bin/promtool"
}

ensure_debian_package() {  # ensure_debian_package COMMAND PACKAGE WHY
  local command="$1" package="$2" why="$3"
  if command -v "$command" >/dev/null 2>&1; then
    say "$command: $(command -v "$command")"
    return 0
  fi
  say "installing Debian's $package ($why)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null) \
    || say "could not install $package: $why will fail" >&2
}

case "$WHAT" in
  prometheus)
    ensure_prometheus
    ;;
  all)
    if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
      say "starting PostgreSQL"
      pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
      for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
    fi
    if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
      say "starting Redis"
      redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
      for _ in $(seq 1 30); do redis-cli ping >/dev/null 2>&1 && break; sleep 1; done
    fi
    # Browser tests drive Debian's Chromium (Playwright's own browser download does not work here).
    ensure_debian_package chromium chromium "the browser tests"
    # Local graphs' latency charts and the recording-rule tests need prometheus and promtool.
    ensure_prometheus || say "the metrics tests will fail without Prometheus" >&2
    # tests/test_deploy.py renders deploy/kustomize with `kubectl kustomize`: any kubectl >= 1.20
    # will do (the manifests stay within the kustomize 2.0.3 that Debian's kubectl 1.20 embeds).
    ensure_debian_package kubectl kubernetes-client "tests/test_deploy.py"
    # Dynamo 1.6.1's Planner virtual connector keeps its decisions in etcd
    # (graphs/runtimes/local/planner.py runs one on loopback per graph with a Planner).
    ensure_debian_package etcd etcd-server "tests/test_planner_local.py"
    # bench/pages_http.py loads the pages with wrk (a C load generator: no client-side queueing).
    ensure_debian_package wrk wrk "bench/pages_http.py"
    # Git repositories (repos/): the product runs git; the tests serve repositories with git daemon.
    ensure_debian_package git git "repository sync and its tests"
    ;;
  *)
    echo "usage: $0 [prometheus|all]" >&2
    exit 2
    ;;
esac
exit 0
