"""onnx-studio: take a trained ONNX model to ONNX Runtime, OpenVINO and TensorRT."""

__version__ = "0.1.0"
