#!/usr/bin/env bash
# LiteRT's ONNX -> TFLite converter: onnx2tf and tf_keras, installed WITHOUT their declared
# dependencies. onnx2tf 1.29 pins tensorflow==2.19, onnx==1.19, numpy==1.26, onnxruntime==1.23 and
# protobuf 4 (it works with the newer ones here: tensorflow-cpu 2.21 from the `litert` extra), and
# tf_keras asks for the full `tensorflow` wheel next to tensorflow-cpu. The pins below are the
# releases tests/test_third_party_internals.py checks (the studio patches onnx2tf internals).
# Idempotent: a no-op when exactly these releases are present. Usage: install_litert_converter.sh PYTHON
set -eu
PY="${1:-python3}"
if "$PY" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('onnx2tf') == '1.29.24' and m.version('tf_keras') == '2.21.0' else 1)" 2>/dev/null; then
  exit 0
fi
"$PY" -m pip install --quiet --no-deps "onnx2tf==1.29.24" "tf_keras==2.21.0"
