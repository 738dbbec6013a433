"""pnnx writes files ncnn will not load for reasons other than a missing layer type, and pnnx itself crashes on
some models: both are one line naming the cause and the remedy.

Found on corpus models: brainmaze_spindle_eeg's segmentation head concatenates a zero-size ConstantOfShape;
pnnx writes it as a MemoryData of h=0 and ncnn's load_model fails ("layer load_model 139 /head/Mul_output_0
failed"): the studio said "ncnn cannot load the weights model.ncnn.bin". oww_melspectrogram's last Clip takes its lower bound from a ReduceMax; pnnx writes an
ncnn Clip with 2 inputs, which ncnn refuses ("invalid bottom_count or top_count for one_blob_only layer 23", on
its stderr only), and the check and export said "a layer it does not know ([])". magika_standard_v3_3 makes pnnx
segfault in its pass_ncnn; the error quoted the last line of pnnx's op table ("└────┴────┘").
Oracles: pnnx and ncnn run by hand on the code-built model (ncnn's load_param refuses the file), and the log a
fake pnnx prints before it dies."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from tests.requirements import require_engine


@pytest.fixture(scope="module")
def ncnn_here():
    require_engine("ncnn")


def _computed_clip_bound(path: Path) -> Path:
    """y = Clip(x, min=ReduceMax(x) - 3): the bound is a tensor computed at run time, not a constant."""
    nodes = [h.make_node("ReduceMax", ["x"], ["m"], keepdims=0), h.make_node("Sub", ["m", "c"], ["lo"]),
             h.make_node("Clip", ["x", "lo", ""], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 8])], [h.make_tensor("c", T.FLOAT, [], [3.0])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def test_pnnx_output_ncnn_refuses_is_named(ncnn_here, tmp_path):
    import ncnn

    from diagnostics.compatibility import check_model
    from studio import api
    from studio.core.engines.ncnn import pnnx_binary
    from studio.core.model import load as load_model

    (tmp_path / "user").mkdir()
    model = _computed_clip_bound(tmp_path / "user" / "clip.onnx")
    # the oracle: pnnx by hand writes a 2-input Clip, and ncnn's own load_param refuses it
    by_hand = tmp_path / "by_hand"
    by_hand.mkdir()
    os.symlink(model, by_hand / "model.onnx")
    subprocess.run([str(pnnx_binary()), "model.onnx", "inputshape=[1,8]f32", "fp16=0"], cwd=by_hand,
                   capture_output=True, check=True, timeout=120)
    clip = [ln.split() for ln in (by_hand / "model.ncnn.param").read_text().splitlines() if ln.startswith("Clip")]
    assert clip and clip[0][2] == "2"
    assert ncnn.Net().load_param(str(by_hand / "model.ncnn.param")) != 0

    before = sorted(p.name for p in model.parent.iterdir())
    report = check_model(load_model(model), ["ncnn"])
    verdict = next(v for v in report.verdicts if v.engine == "ncnn")
    assert verdict.verdict == "fails"
    text = verdict.summary
    assert "Clip" in text and "2 input(s)" in text and "another engine" in text and "\n" not in text, text
    assert "([])" not in text

    r = api.export(api.load(model), "ncnn", tmp_path / "out", zip=False, pool_key="ncnn-refusals")
    (t,) = r.targets
    assert t.status == "error" and "Clip" in t.message and "another engine" in t.message, t.message
    assert "\n" not in t.message and "([])" not in t.message
    assert sorted(p.name for p in model.parent.iterdir()) == before


def _zero_size_constant(path: Path) -> Path:
    """y = Concat(Relu(x), 2 * ConstantOfShape([n, 0, 1])) on axis 1: an empty tensor ONNX allows, computed from
    the input's shape."""
    import numpy as np
    from onnx import numpy_helper as nh

    inits = [nh.from_array(np.array(0, np.int64), "i0"), nh.from_array(np.array([0], np.int64), "ax"),
             nh.from_array(np.array([0, 1], np.int64), "rest"), nh.from_array(np.array(2.0, np.float32), "two")]
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("Shape", ["r"], ["s"]),
             h.make_node("Gather", ["s", "i0"], ["b"], axis=0), h.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
             h.make_node("Concat", ["b1", "rest"], ["shp"], axis=0), h.make_node("ConstantOfShape", ["shp"], ["z"]),
             h.make_node("Mul", ["z", "two"], ["z2"]), h.make_node("Concat", ["r", "z2"], ["y"], axis=1)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", 8, 1])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["n", 8, 1])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def test_zero_size_constant_ncnn_cannot_load_is_named(ncnn_here, tmp_path):
    import ncnn

    from diagnostics.compatibility import check_model
    from studio.core.engines.ncnn import pnnx_binary
    from studio.core.model import load as load_model

    model = _zero_size_constant(tmp_path / "zero.onnx")
    by_hand = tmp_path / "by_hand"       # the oracle: pnnx's file, and ncnn's own load_model refusing it
    by_hand.mkdir()
    os.symlink(model, by_hand / "model.onnx")
    subprocess.run([str(pnnx_binary()), "model.onnx", "inputshape=[1,8,1]f32", "fp16=0"], cwd=by_hand,
                   capture_output=True, check=True, timeout=120)
    net = ncnn.Net()
    assert net.load_param(str(by_hand / "model.ncnn.param")) == 0
    assert net.load_model(str(by_hand / "model.ncnn.bin")) != 0

    report = check_model(load_model(model), ["ncnn"], dims={"n": 1})
    verdict = next(v for v in report.verdicts if v.engine == "ncnn")
    assert verdict.verdict == "fails"
    text = verdict.summary
    assert "'z2'" in text and "zero-size" in text and "fix-input-shapes,onnxsim" in text, text
    assert "\n" not in text


_CRASH_LOG = """inputshape = [1,2048]i32
############# pass_level0 onnx
eliminate_noop_with_shape ...         0.03ms
┌──────────────────┬──────────┬──────────┐
│ Conv             │ 1        │ 1        │
└──────────────────┴──────────┴──────────┘
############# pass_level5
############# pass_ncnn
"""


def test_pnnx_crash_names_its_pass_not_its_op_table(tmp_path, monkeypatch):
    from studio.core.engines import ncnn as ncnn_mod
    from studio.core.engines.conversion import ConversionFailed

    fake = tmp_path / "pnnx"
    (tmp_path / "log.txt").write_text(_CRASH_LOG)
    fake.write_text(f"#!/bin/sh\ncat '{tmp_path / 'log.txt'}'\nkill -SEGV $$\n")
    fake.chmod(0o755)
    monkeypatch.setattr(ncnn_mod, "pnnx_binary", lambda: fake)
    model = _computed_clip_bound(tmp_path / "m.onnx")
    with pytest.raises(ConversionFailed) as caught:
        ncnn_mod.convert_to_ncnn(model, tmp_path / "out", {"x": (1, 8)})
    text = str(caught.value)
    assert f"signal {int(signal.SIGSEGV)}, SIGSEGV" in text and "pass_ncnn" in text, text
    assert "another engine" in text and "─" not in text and "0.03ms" not in text and "\n" not in text


def test_export_notes_do_not_say_a_refused_conversion_ran(ncnn_here, tmp_path):
    """A bool input is refused before pnnx runs (corpus romanizer_ar_encoder's src_mask): the export's notes said
    'converted in 0.00 s (?)'."""
    from studio import api
    from tests.core.test_ncnn_input_kinds import bool_input

    model = tmp_path / "mask.onnx"
    onnx.save(bool_input(), str(model))
    r = api.export(api.load(model), "ncnn", tmp_path / "out", zip=False, pool_key="ncnn-refusals")
    (t,) = r.targets
    assert t.status == "error" and "bool input 'mask'" in t.message, t.message
    assert "refused before the converter ran" in t.notes and not any(n.startswith("converted in") for n in t.notes)
