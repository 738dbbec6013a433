"""R01-R05, R12, R13: files that are not loadable models give a one-line error
naming the problem, and the input file is never modified."""

from __future__ import annotations

import json
import uuid
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio.core.errors import ModelLoadError, PathError, StudioError
from studio.core.model import load
from tests.conftest import SAMPLES, assert_user_message, parse_model, save, sha256_file

TINY = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] x) => (float[2,3] y) { y = Relu(x) }
"""


def _expect_error(path: Path, *needles: str, cls: type[Exception] = ModelLoadError) -> str:
    small = path.is_file() and path.stat().st_size < 2**26
    before = sha256_file(path) if small else (path.stat().st_mtime_ns if path.is_file() else None)
    with pytest.raises(cls) as info:
        load(path)
    assert_user_message(str(info.value), *needles)
    if before is not None:
        assert (sha256_file(path) if small else path.stat().st_mtime_ns) == before
    return str(info.value)


def test_loads_a_valid_model(tmp_path):
    p = save(parse_model(TINY), tmp_path / "m.onnx")
    h = load(p)
    assert h.check.ok and len(h.sha256) == 64 and h.file_bytes == p.stat().st_size


def test_r01_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    _expect_error(p, "empty")


@pytest.mark.parametrize("fraction", [0.6, "n-1"])
def test_r01_truncated(tmp_path, fraction):
    data = (SAMPLES / "cnn_unfused.onnx").read_bytes()
    cut = len(data) - 1 if fraction == "n-1" else int(len(data) * fraction)
    p = tmp_path / "trunc.onnx"
    p.write_bytes(data[:cut])
    _expect_error(p, "truncated")


@pytest.mark.parametrize("content,needle", [
    (os.urandom(4096), "not an onnx model"),
    (json.dumps({"a": 1}).encode(), "json"),
    (b"<!DOCTYPE html><html><body>Not found</body></html>", "html"),
    (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n", "git lfs"),
    (b'<?xml version="1.0"?>\n<net name="m" version="11"><layers/></net>', "openvino"),
    (b"\x1c\x00\x00\x00TFL3" + b"\x00" * 64, "tensorflow lite"),
    (pickle.dumps({"state_dict": [1, 2, 3]}), "pickle"),
])
def test_r02_r03_not_onnx_is_named(tmp_path, content, needle):
    p = tmp_path / "model.onnx"
    p.write_bytes(content)
    _expect_error(p, needle)


def test_r02_pytorch_zip_checkpoint_never_unpickled(tmp_path):
    p = tmp_path / "model.pt"
    pwned = Path(f"/tmp/pwned-onnx-studio-{uuid.uuid4().hex}")       # this run's own name: never a stale file
    with zipfile.ZipFile(p, "w") as zf:
        # A pickle that would run code if anything unpickled it.
        zf.writestr("archive/data.pkl", f"cos\nsystem\n(S'touch {pwned}'\ntR.".encode())
        zf.writestr("archive/version", "3")
    _expect_error(p, "pytorch checkpoint")
    assert not pwned.exists()


def test_r04_single_file_over_2gib(tmp_path):
    p = tmp_path / "huge.onnx"
    valid = parse_model(TINY).SerializeToString()
    with open(p, "wb") as fh:           # sparse file: no real disk use
        fh.write(valid)
        fh.truncate(2**31 + 10)
    _expect_error(p, "2 gib", "external data")


def test_r05_ir_version_99(tmp_path):
    m = parse_model(TINY)
    m.ir_version = 99
    _expect_error(save(m, tmp_path / "m.onnx"), "unsupported ir version 99")


def test_r05_opset_9999(tmp_path):
    m = parse_model(TINY)
    m.opset_import[0].version = 9999
    _expect_error(save(m, tmp_path / "m.onnx"), "unsupported opset", "9999")


def test_r05_missing_opset_import(tmp_path):
    m = parse_model(TINY)
    del m.opset_import[:]
    _expect_error(save(m, tmp_path / "m.onnx"), "opset_import")


def _weight_model(t: TensorProto) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Add", ["x", t.name], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [t])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_r13_dims_2_pow_40_without_data(tmp_path):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**40])
    _expect_error(save(_weight_model(t), tmp_path / "m.onnx"), "declared tensor size")


def test_r13_overflowing_dims(tmp_path):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**32, 2**32])
    _expect_error(save(_weight_model(t), tmp_path / "m.onnx"), "declared tensor size")


def test_r13_negative_dims(tmp_path):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[-4])
    t.raw_data = b"\0" * 16
    _expect_error(save(_weight_model(t), tmp_path / "m.onnx"), "negative")


def test_r13_raw_data_shorter_than_dims(tmp_path):
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.dims[:] = [1000]
    _expect_error(save(_weight_model(t), tmp_path / "m.onnx"), "declared tensor size")


def test_r13_typed_data_shorter_than_dims(tmp_path):
    t = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    t.dims[:] = [4000]
    _expect_error(save(_weight_model(t), tmp_path / "m.onnx"), "declared tensor size")


@pytest.mark.parametrize("make", ["directory", "fifo", "missing", "device"])
def test_r21_bad_path_kinds(tmp_path, make):
    if make == "directory":
        p = tmp_path / "d.onnx"
        p.mkdir()
    elif make == "fifo":
        p = tmp_path / "f.onnx"
        os.mkfifo(p)
    elif make == "missing":
        p = tmp_path / "nope.onnx"
    else:
        p = Path("/dev/zero")
    with pytest.raises(PathError) as info:
        load(p)
    assert_user_message(str(info.value))


def test_errors_are_studio_errors():
    assert issubclass(ModelLoadError, StudioError) and issubclass(PathError, StudioError)
