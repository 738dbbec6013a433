#!/usr/bin/env bash
# LiteRT's ONNX -> TFLite converter: onnx2tf and tf_keras, installed WITHOUT their declared
# dependencies. onnx2tf 1.29 pins tensorflow==2.19, onnx==1.19, numpy==1.26, onnxruntime==1.23 and
# protobuf 4 (it works with the newer ones here: tensorflow-cpu 2.21 from the `litert` extra), and
# tf_keras asks for the full `tensorflow` wheel next to tensorflow-cpu. Idempotent: a no-op when
# both are present. Usage: install_litert_converter.sh PYTHON
set -eu
PY="${1:-python3}"
if "$PY" -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('onnx2tf') and u.find_spec('tf_keras') else 1)"; then
  exit 0
fi
"$PY" -m pip install --quiet --no-deps "onnx2tf==1.29.24" "tf_keras==2.21.0"
