#!/usr/bin/env bash
# Refresh the vendored front-end assets from the npm registry at the pinned versions.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent htmx.org@2.0.8 htmx-ext-sse@2.2.4 uplot@1.6.32 >/dev/null && for f in *.tgz; do mkdir "${f%.tgz}" && tar xzf "$f" -C "${f%.tgz}"; done)
cp "$tmp"/htmx.org-2.0.8/package/dist/htmx.min.js "$tmp"/htmx.org-2.0.8/package/LICENSE static/vendor/htmx-2.0.8/
mkdir -p static/vendor/htmx-ext-sse-2.2.4
cp "$tmp"/htmx-ext-sse-2.2.4/package/dist/sse.min.js "$tmp"/htmx-ext-sse-2.2.4/package/LICENSE static/vendor/htmx-ext-sse-2.2.4/
cp "$tmp"/uplot-1.6.32/package/dist/uPlot.iife.min.js "$tmp"/uplot-1.6.32/package/dist/uPlot.min.css \
   "$tmp"/uplot-1.6.32/package/LICENSE static/vendor/uplot-1.6.32/
echo "vendored assets refreshed"
