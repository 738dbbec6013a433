#!/usr/bin/env bash
# Rebuild studio/graphview/vendor/echarts.graph.min.js from npm (pinned versions):
# Apache ECharts 6.1.0 (Apache-2.0) with zrender 6.1.0 (BSD-3-Clause) and tslib (0BSD),
# bundled by esbuild with only the graph series, tooltip, title and the canvas renderer.
# The output is committed; this script documents and reproduces it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENDOR="$ROOT/studio/graphview/vendor"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
npm init -y >/dev/null
npm install --no-audit --no-fund --silent echarts@6.1.0 zrender@6.1.0 esbuild@0.25.12
cp "$VENDOR/echarts-entry.js" entry.js
./node_modules/.bin/esbuild entry.js --bundle --minify --format=iife --legal-comments=none --outfile=bundle.js
{
  printf '/*! Apache ECharts 6.1.0 (Apache-2.0), zrender 6.1.0 (BSD-3-Clause), tslib (0BSD).\n'
  printf ' * Built from npm by scripts/build_echarts_bundle.sh; licences in studio/graphview/vendor/. */\n'
  cat bundle.js
} > "$VENDOR/echarts.graph.min.js"
cp node_modules/echarts/LICENSE "$VENDOR/LICENSE-echarts"
cp node_modules/echarts/NOTICE "$VENDOR/NOTICE-echarts"
cp node_modules/echarts/licenses/LICENSE-d3 "$VENDOR/LICENSE-d3"
cp node_modules/zrender/LICENSE "$VENDOR/LICENSE-zrender"
cp node_modules/tslib/LICENSE.txt "$VENDOR/LICENSE-tslib"
ls -l "$VENDOR/echarts.graph.min.js"
