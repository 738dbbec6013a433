"""The one weight count (studio.core.model.model_weight_bytes, issue 34's one implementation of each idea):
the model file plus the external-data ranges its graph declares, each referenced file once, never a file
it does not reference, never a location outside its folder; an IR .xml plus its .bin. Every expected
figure is worked out by hand from the bytes the test wrote. The old count (every weight-like file of the
folder) counted the neighbours too: for ``a.onnx`` below it gave the graph + 4000 + 8000 + 500 bytes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from studio.core import mapped_pages
from studio.core.model import model_weight_bytes
from studio.core.sandbox import GiB, Limits, session_limits, worker_limit_refusal

MiB = 2**20


def _external(name: str, n_floats: int, location: str, offset: int | None = None,
              length: int | None = None) -> TensorProto:
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[n_floats])
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            t.external_data.add(key=key, value=str(value))
    return t


def _write_model(path: Path, tensors: list[TensorProto]) -> int:
    """A graph summing ``tensors`` (all [n] floats of one n), written to ``path``; returns its size."""
    n = tensors[0].dims[0]
    nodes = [helper.make_node("Sum", [t.name for t in tensors], ["y"])]
    g = helper.make_graph(nodes, path.stem, [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
                          tensors)
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    path.write_bytes(data)
    return len(data)


def test_two_models_in_one_folder_count_only_their_own_data_file(tmp_path):
    (tmp_path / "a.data").write_bytes(b"\0" * 4000)
    (tmp_path / "b.data").write_bytes(b"\0" * 8000)
    (tmp_path / "notes.bin").write_bytes(b"\0" * 500)             # weight-like, referenced by nobody
    a = _write_model(tmp_path / "a.onnx", [_external("w", 1000, "a.data", 0, 4000)])
    b = _write_model(tmp_path / "b.onnx", [_external("w", 2000, "b.data")])   # no offset/length: whole file
    assert model_weight_bytes(tmp_path / "a.onnx") == a + 4000
    assert model_weight_bytes(tmp_path / "b.onnx") == b + 8000


def test_the_worker_limit_holds_this_models_weights_not_its_neighbours(tmp_path, monkeypatch):
    """600 MiB declared by a.onnx, 600 MiB more beside it for b.onnx (sparse files: no disk used)."""
    import psutil

    for env in ("ONNX_STUDIO_MEMORY_GB", "ONNX_STUDIO_TIMEOUT_S"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("ONNX_STUDIO_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("VM", (), {"total": 64 * GiB})())
    for name in ("a.data", "b.data"):
        with open(tmp_path / name, "wb") as fh:
            fh.truncate(600 * MiB)
    _write_model(tmp_path / "a.onnx", [_external("w", 150 * MiB, "a.data", 0, 600 * MiB)])
    _write_model(tmp_path / "b.onnx", [_external("w", 150 * MiB, "b.data", 0, 600 * MiB)])
    # 3 GiB + 600 MiB (+ the graph's few hundred bytes), rounded up to whole GiB: 4 GiB (both files: 5 GiB)
    assert session_limits(None, tmp_path / "a.onnx").memory_bytes == 4 * GiB
    # a 1 GiB limit refuses in one line naming a's 0.6 GiB, not 1.2 GiB
    refusal = worker_limit_refusal(tmp_path / "a.onnx", "the check", Limits(timeout_s=60.0, memory_bytes=GiB))
    assert refusal is None
    refusal = worker_limit_refusal(tmp_path / "a.onnx", "the check", Limits(timeout_s=60.0, memory_bytes=GiB // 2))
    assert refusal is not None and "0.6 GiB of weights" in refusal


def test_ranges_into_one_shared_file_count_once_each(tmp_path):
    shared = tmp_path / "shared.bin"
    shared.write_bytes(b"\0" * 2048)                 # 48 bytes of padding that no tensor declares
    (tmp_path / "whole.data").write_bytes(b"\0" * 400)
    tensors = [_external("w0", 100, "shared.bin", 0, 400),
               _external("w1", 100, "shared.bin", 400, 1000),     # 1000 bytes declared for 400: as declared
               _external("w2", 100, "shared.bin", 1400, 600),
               _external("tied", 100, "shared.bin", 0, 400),      # the same range again: counted once
               _external("u0", 100, "whole.data"),                # no length: the whole 400-byte file...
               _external("u1", 100, "whole.data", 0)]             # ...named twice, counted once
    size = _write_model(tmp_path / "m.onnx", tensors)
    assert model_weight_bytes(tmp_path / "m.onnx") == size + (400 + 1000 + 600) + 400


def test_locations_outside_the_folder_are_never_counted(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.data").write_bytes(b"\0" * 5000)
    os.symlink(tmp_path / "secret.data", folder / "link.data")
    (folder / "own.data").write_bytes(b"\0" * 400)
    size = _write_model(folder / "m.onnx", [_external("w0", 100, "own.data", 0, 400),
                                            _external("w1", 100, "../secret.data", 0, 4000),
                                            _external("w2", 100, "link.data", 0, 4000),
                                            _external("w3", 100, "/etc/hostname", 0, 4000),
                                            _external("w4", 100, "missing.data", 0, 4000)])
    assert model_weight_bytes(folder / "m.onnx") == size + 400
    assert model_weight_bytes(folder / "absent.onnx") == 0


def test_a_checkpoint_counts_its_hard_linked_weights_in_its_data_dir(tmp_path):
    """Pipeline checkpoints hard-link their private weight copies and resolve them against ``data_dir``."""
    data_dir, ckpt = tmp_path / "weights", tmp_path / "step1"
    data_dir.mkdir()
    ckpt.mkdir()
    (data_dir / "w.data").write_bytes(b"\0" * 4000)
    os.link(data_dir / "w.data", data_dir / "w2.data")
    size = _write_model(ckpt / "m.onnx", [_external("w", 1000, "w2.data", 0, 4000)])
    assert model_weight_bytes(ckpt / "m.onnx", data_dir) == size + 4000
    assert model_weight_bytes(ckpt / "m.onnx") == size                       # not beside it


def test_an_openvino_ir_counts_its_xml_and_its_own_bin(tmp_path):
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1000], np.float32, name="x")
    model = ov.Model([ops.add(x, ops.constant(np.ones(1000, np.float32)))], [x], "ir")
    ov.save_model(model, str(tmp_path / "m.xml"), compress_to_fp16=False)
    assert (tmp_path / "m.bin").stat().st_size == 4000                     # 1000 float32, by hand
    (tmp_path / "other.bin").write_bytes(b"\0" * 700)                     # another IR's weights
    xml = (tmp_path / "m.xml").stat().st_size
    assert model_weight_bytes(tmp_path / "m.xml") == xml + 4000


def test_the_mapped_pages_gate_reads_the_same_count(tmp_path, monkeypatch):
    (tmp_path / "a.data").write_bytes(b"\0" * 4000)
    (tmp_path / "b.data").write_bytes(b"\0" * 8000)
    a = _write_model(tmp_path / "a.onnx", [_external("w", 1000, "a.data", 0, 4000)])
    monkeypatch.setattr(mapped_pages, "MIN_WEIGHT_BYTES", a + 4000)
    assert isinstance(mapped_pages.released_pages(tmp_path / "a.onnx"), mapped_pages.ReleasedFilePages)
    monkeypatch.setattr(mapped_pages, "MIN_WEIGHT_BYTES", a + 4001)
    assert not isinstance(mapped_pages.released_pages(tmp_path / "a.onnx"), mapped_pages.ReleasedFilePages)
