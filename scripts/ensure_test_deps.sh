#!/usr/bin/env bash
# Install the system packages the tests drive: Debian's chromium (browser tests,
# driven by Playwright through executable_path) and graphviz (SVG export).
# Installs only when missing and when we may (root, or passwordless sudo).
# Under CI (CI=true or ONNX_STUDIO_REQUIRE_ALL=1) nothing is optional (R55): a component that cannot be
# installed fails this script, naming it; elsewhere it is reported and the tests that need it skip.
set -u
PY="${PYTHON:-$(dirname "$0")/../.venv/bin/python}"
ci=0
case "${CI:-}" in true|TRUE|True|1|yes) ci=1 ;; esac
[ "${ONNX_STUDIO_REQUIRE_ALL:-}" = 1 ] && ci=1
missing() {   # missing WHAT CONSEQUENCE: fatal under CI, a note otherwise
  if [ "$ci" = 1 ]; then echo "ensure_test_deps: CI: $1; CI requires it" >&2; exit 1; fi
  echo "ensure_test_deps: $1; $2" >&2
}
# ONNX Runtime's C++ headers for the plugin build tests (the pip wheel has none).
bash "$(dirname "$0")/fetch_ort_headers.sh" \
  || missing "ONNX Runtime headers not fetched" "the plugin build tests for ONNX Runtime will be skipped"
# LiteRT's converter (onnx2tf, tf_keras) goes in without its pinned dependencies; then it must import.
if ! bash "$(dirname "$0")/install_litert_converter.sh" "$PY"; then
  missing "onnx2tf (LiteRT's converter) not installed" "LiteRT tests will be skipped"
else
  # a log of our own (mktemp), never a fixed /tmp name another user or run may own (the redirect would fail and
  # read as "does not import")
  import_log=$(mktemp "${TMPDIR:-/tmp}/onnx-studio-litert-import.XXXXXX")
  "$PY" -c "import onnx2tf, tf_keras, tensorflow" >"$import_log" 2>&1
  imported=$?
  why=$(tail -1 "$import_log")
  rm -f "$import_log"
  [ "$imported" = 0 ] || missing "LiteRT's converter does not import ($why)" "LiteRT tests will be skipped"
fi
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium fonts-liberation fonts-noto-color-emoji)
command -v dot >/dev/null 2>&1 || need+=(graphviz)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
  missing "missing ${need[*]} and no permission to install them (install: apt-get install ${need[*]})" \
          "browser/SVG tests will be skipped"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt_log=$(mktemp "${TMPDIR:-/tmp}/onnx-studio-apt.XXXXXX")
if ! $SUDO apt-get install -y --no-install-recommends "${need[@]}" >"$apt_log" 2>&1; then
  $SUDO apt-get update >>"$apt_log" 2>&1
  $SUDO apt-get install -y --no-install-recommends "${need[@]}" >>"$apt_log" 2>&1 \
    || { echo "ensure_test_deps: apt-get install ${need[*]} failed (see $apt_log)" >&2; exit 1; }
fi
rm -f "$apt_log"
echo "ensure_test_deps: installed ${need[*]}"
