#!/usr/bin/env bash
# Fetch ONNX Runtime's public C/C++ headers (onnxruntime_c_api.h, onnxruntime_cxx_api.h,
# onnxruntime_lite_custom_op.h, ...) for building ONNX Runtime custom-op libraries; the onnxruntime pip
# wheel ships none and Debian bookworm has no package. They come from the npm package
# com.github.asus4.onnxruntime (MIT; it bundles ONNX Runtime's release headers), fetched with `npm pack`.
# Only the header folder is kept, in ~/.cache/onnx-studio/ort-headers/<package version>/.
# Headers of any release work for any newer runtime: the C API is ABI-stable and versioned.
set -euo pipefail
PKG="com.github.asus4.onnxruntime"
VERSION="${ORT_HEADERS_NPM_VERSION:-0.4.9}"
DEST="${XDG_CACHE_HOME:-$HOME/.cache}/onnx-studio/ort-headers/npm-$VERSION"
if [ -f "$DEST/onnxruntime_lite_custom_op.h" ]; then echo "fetch_ort_headers: already in $DEST"; exit 0; fi
command -v npm >/dev/null 2>&1 || { echo "fetch_ort_headers: npm is not installed (apt-get install npm)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack "$PKG@$VERSION" --silent >/dev/null)
tarball="$(ls "$work"/*.tgz)"
member="package/Plugins/iOS~/onnxruntime.xcframework/ios-arm64/onnxruntime.framework/Headers"
tar -xzf "$tarball" -C "$work" --wildcards "$member/*.h" package/LICENSE
mkdir -p "$DEST"
cp "$work/$member"/*.h "$DEST"/
cp "$work/package/LICENSE" "$DEST/LICENSE.npm-package"
echo "fetch_ort_headers: ONNX Runtime headers (ORT_API_VERSION $(grep -m1 -o 'ORT_API_VERSION [0-9]*' "$DEST/onnxruntime_c_api.h" | cut -d' ' -f2)) in $DEST"
