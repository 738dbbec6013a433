#!/usr/bin/env bash
# Refresh studio/graphview/vendor/elk.bundled.js from npm (pinned): elkjs, the Eclipse
# Layout Kernel compiled to JavaScript (EPL-2.0). The file is committed unchanged;
# this script documents and reproduces it. Usage: scripts/fetch_elkjs.sh [VERSION]
set -euo pipefail
VERSION="${1:-0.12.1}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENDOR="$ROOT/studio/graphview/vendor"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
npm pack --silent "elkjs@$VERSION" >/dev/null
tar xzf "elkjs-$VERSION.tgz"
cp package/lib/elk.bundled.js "$VENDOR/elk.bundled.js"
cp package/LICENSE.md "$VENDOR/LICENSE-elkjs"
sha256sum "$VENDOR/elk.bundled.js"
