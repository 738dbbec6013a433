"""R06, R09, R12: external data is validated by the studio before any engine
sees the model: every TensorProto, every kind of escape, offsets in range."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio.core.errors import UnsafeModelError
from studio.core.model import load
from tests.conftest import SAMPLES, assert_user_message, sha256_file

SECRET = b"TOP-SECRET-CONTENT-" * 10


def _ext_tensor(name: str, location: str, offset: int | None = None, length: int | None = None,
                dims=(4,), extra: dict | None = None) -> TensorProto:
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if offset is not None:
        entries["offset"] = str(offset)
    if length is not None:
        entries["length"] = str(length)
    entries.update(extra or {})
    for k, v in entries.items():
        t.external_data.add(key=k, value=v)
    return t


def _model_with_initializer(t: TensorProto) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Add", ["x", t.name], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [t])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _constant_model(t: TensorProto) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Constant", [], ["c"], value=t),
                           helper.make_node("Add", ["x", "c"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _if_model(t: TensorProto) -> onnx.ModelProto:
    branch = helper.make_graph([helper.make_node("Add", ["x", t.name], ["b"])], "then", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])], [t])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["b2"])], "else", [],
                              [helper.make_tensor_value_info("b2", TensorProto.FLOAT, [4])])
    g = helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other)],
                          "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _loop_model(t: TensorProto) -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", t.name], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [4])], [t])
    g = helper.make_graph([helper.make_node("Loop", ["n", "c", "x"], ["y"], body=body)], "g",
                          [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                           helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _function_model(t: TensorProto) -> onnx.ModelProto:
    fn = helper.make_function("local", "AddW", ["x"], ["y"],
                              [helper.make_node("Constant", [], ["w"], value=t),
                               helper.make_node("Add", ["x", "w"], ["y"])],
                              [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("AddW", ["x"], ["y"], domain="local")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                             functions=[fn], ir_version=8)


def _sparse_model(t: TensorProto) -> onnx.ModelProto:
    idx = numpy_helper.from_array(np.array([0], np.int64), "idx")
    sparse = helper.make_sparse_tensor(t, idx, [4])
    g = helper.make_graph([helper.make_node("Add", ["x", t.name], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                          sparse_initializer=[sparse])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def victim(tmp_path) -> Path:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    return secret


def _check_refused(model: onnx.ModelProto, folder: Path, *needles: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "model.onnx"
    p.write_bytes(model.SerializeToString())
    before = sha256_file(p)
    with pytest.raises(UnsafeModelError) as info:
        load(p)
    msg = str(info.value)
    assert_user_message(msg, *needles)
    assert "TOP-SECRET" not in msg and "root:" not in msg
    assert sha256_file(p) == before
    return msg


@pytest.mark.parametrize("location", ["../../../../etc/passwd", "../secret.txt", "/etc/passwd",
                                      "/dev/zero", "..\\secret.txt", "sub/../../secret.txt", "~/.ssh/id_rsa"])
def test_r06_location_escapes(tmp_path, victim, location):
    _check_refused(_model_with_initializer(_ext_tensor("w", location)), tmp_path / "m", "external data")


def test_r06_symlink_out_of_folder(tmp_path, victim):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "weights.bin").symlink_to(victim)
    _check_refused(_model_with_initializer(_ext_tensor("w", "weights.bin")), folder, "symbolic link")


def test_r06_symlinked_subfolder(tmp_path, victim):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "sub").symlink_to(tmp_path)
    _check_refused(_model_with_initializer(_ext_tensor("w", "sub/secret.txt")), folder, "symbolic link")


def test_r06_hardlink(tmp_path, victim):
    folder = tmp_path / "m"
    folder.mkdir()
    os.link(victim, folder / "weights.bin")
    _check_refused(_model_with_initializer(_ext_tensor("w", "weights.bin")), folder, "hard link")


@pytest.mark.parametrize("builder", [_constant_model, _if_model, _loop_model, _function_model, _sparse_model])
def test_r09_hidden_external_data_everywhere(tmp_path, victim, builder):
    _check_refused(builder(_ext_tensor("w", "../secret.txt")), tmp_path / "m", "external data")


def _data_file(folder: Path, size: int = 16) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "w.bin").write_bytes(b"\0" * size)


@pytest.mark.parametrize("offset,length,needle", [
    (32, None, "out of range"), (0, 64, "out of range"), (0, 2**40, "out of range"),
    (8, 8, "declared tensor size"),
])
def test_r12_offset_length(tmp_path, offset, length, needle):
    folder = tmp_path / "m"
    _data_file(folder)
    _check_refused(_model_with_initializer(_ext_tensor("w", "w.bin", offset, length)), folder, needle)


def test_r12_missing_file(tmp_path):
    _check_refused(_model_with_initializer(_ext_tensor("w", "nope.bin")), tmp_path / "m", "missing")


def test_r12_unknown_key(tmp_path):
    folder = tmp_path / "m"
    _data_file(folder)
    _check_refused(_model_with_initializer(_ext_tensor("w", "w.bin", extra={"__class__": "x"})), folder,
                   "invalid key")


def test_r12_no_folder_for_bytes(tmp_path):
    from studio.core.tensor_safety import validate_tensors

    with pytest.raises(UnsafeModelError) as info:
        validate_tensors(_model_with_initializer(_ext_tensor("w", "w.bin")), None)
    assert_user_message(str(info.value), "external data")


def test_valid_external_data_loads_lazily():
    h = load(SAMPLES / "external_data.onnx")
    assert h.external_files and h.external_files[0].name == "external_data.onnx.data"
    assert h.scan.external_bytes > 100_000
    # Weights were not read into the proto.
    assert all(t.data_location == TensorProto.EXTERNAL for t in h.proto.graph.initializer
               if t.name in {r.tensor for r in h.scan.external})
    assert h.proto.ByteSize() < 10_000
