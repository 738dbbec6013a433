"""ORT's TensorRT EP: the TensorRT table of the requested version decides its nodes, and a node
TensorRT lacks falls back along the selected providers (TensorRT EP -> CUDA EP -> CPU EP)."""

from __future__ import annotations

from onnx import TensorProto, helper

from studio import api


def _file(model_file, nodes, inputs, opset):
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, [y]),
                          opset_imports=[helper.make_opsetid("", opset)])
    return model_file(m)


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])


def _ort(path, eps, trt_version="10"):
    return api.check(api.load(path), ["onnxruntime"], eps=eps, trt_version=trt_version)


def test_trt_ep_uses_the_requested_trt_version(model_file):
    # Swish: not in TensorRT 10's parser, added in 11.
    path = _file(model_file, [helper.make_node("Swish", ["x"], ["y"], name="sw")], [X], 24)
    r10 = _ort(path, ("cpu", "tensorrt"), "10")
    assert any(f.code == "ORT-CPU-FALLBACK" and f.node == "sw" for f in r10.findings)
    assert r10.verdict("onnxruntime", "TensorrtExecutionProvider").verdict == "runs with warnings"
    r11 = _ort(path, ("cpu", "tensorrt"), "11")
    assert not [f for f in r11.findings if f.target == "TensorrtExecutionProvider"]
    assert r11.verdict("onnxruntime", "TensorrtExecutionProvider").verdict == "runs"
    assert any("TensorRT 11.x" in n for n in r11.notes)


def test_trt_ep_falls_back_to_cuda_when_selected(model_file):
    # Compress: TensorRT has none, the CUDA EP has a kernel.
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [2])
    path = _file(model_file, [helper.make_node("Compress", ["x", "c"], ["y"], name="cmp", axis=0)], [X, c], 17)
    trt = "TensorrtExecutionProvider"
    alone = _ort(path, ("cpu", "tensorrt"))
    assert [f.code for f in alone.findings if f.target == trt] == ["ORT-CPU-FALLBACK"]
    with_cuda = _ort(path, ("cpu", "cuda", "tensorrt"))
    mine = [f for f in with_cuda.findings if f.target == trt]
    assert [f.code for f in mine] == ["ORT-EP-FALLBACK"] and "CUDAExecutionProvider" in mine[0].message
    node = next(v for v in with_cuda.nodes if v.target == trt and v.node == "cmp")
    assert node.status == "restricted" and node.reason.startswith("falls back to CUDAExecutionProvider")
    assert not [f for f in with_cuda.findings if f.target == "CUDAExecutionProvider"]
