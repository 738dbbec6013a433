"""onnx-studio: take a trained ONNX model to ONNX Runtime, OpenVINO and TensorRT."""

from studio.core.telemetry import quiet_third_party_telemetry

__version__ = "0.1.0"

quiet_third_party_telemetry()     # before any engine is imported, here and in every worker
