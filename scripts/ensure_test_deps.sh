#!/usr/bin/env bash
# Install the system packages the tests drive: Debian's chromium (browser tests,
# driven by Playwright through executable_path) and graphviz (SVG export).
# Installs only when missing and when we may (root, or passwordless sudo).
set -u
# ONNX Runtime's C++ headers for the plugin build tests (the pip wheel has none); non-fatal.
bash "$(dirname "$0")/fetch_ort_headers.sh" || echo "ensure_test_deps: ONNX Runtime headers not fetched" >&2
# LiteRT's converter (onnx2tf, tf_keras) goes in without its pinned dependencies; non-fatal.
bash "$(dirname "$0")/install_litert_converter.sh" "${PYTHON:-$(dirname "$0")/../.venv/bin/python}" \
  || echo "ensure_test_deps: onnx2tf not installed; LiteRT tests will be skipped" >&2
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium fonts-liberation fonts-noto-color-emoji)
command -v dot >/dev/null 2>&1 || need+=(graphviz)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
  echo "ensure_test_deps: missing ${need[*]} and no permission to install them;" \
       "browser/SVG tests will be skipped (install: apt-get install ${need[*]})" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends "${need[@]}" >/tmp/onnx-studio-apt.log 2>&1; then
  $SUDO apt-get update >>/tmp/onnx-studio-apt.log 2>&1
  $SUDO apt-get install -y --no-install-recommends "${need[@]}" >>/tmp/onnx-studio-apt.log 2>&1 \
    || { echo "ensure_test_deps: apt-get install ${need[*]} failed (see /tmp/onnx-studio-apt.log)" >&2; exit 1; }
fi
echo "ensure_test_deps: installed ${need[*]}"
