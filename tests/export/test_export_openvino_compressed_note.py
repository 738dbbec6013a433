"""The OpenVINO export's note on what a plain ``compile_model`` of the IR gives names the CPU plugin's activation
quantization of MatMuls whose weights are stored as int8 (int8 -> Convert -> Multiply: on by default at any
precision) whatever the CPU's default precision: an AVX2-only CPU (f32 default) said nothing while its plain
compile gave 0.15 max abs on the int8-weights model vs 0 verified. The CPU's default precision is simulated through
``default_precision_note``'s ``default`` argument, so both kinds of CPU are tested on any machine.
Oracles: plain ``openvino.Core().compile_model`` (the simulated CPU's defaults: its precision pinned, the activation
quantization left at the plugin's default) vs plain onnxruntime on the export's seeded feeds; the IRs' MatMuls
counted by hand."""

from __future__ import annotations

import functools
import re

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
import pytest

from studio import api
from studio.core.feeds import input_specs, random_feeds
from studio.export import openvino as ov_export
from tests.accuracy.test_openvino_f32_pinned import _int8_weights_model
from tests.export.test_export_openvino_default_precision import _matmul_model

QUANTIZED = re.compile(r"CPU plugin quantizes on the fly the activations of the (\d+) MatMul\(s\) whose weights "
                       r"model\.xml stores as integers .* compiled without (.*?) \(plain compile_model, Triton's "
                       r"OpenVINO backend\) model\.xml gives max abs (\S+) vs the original \((\S+) with f32 and "
                       r"DYNAMIC_QUANTIZATION_GROUP_SIZE=0 pinned[^)]*\); set (.*) in your compile_model config")


def _export(tmp_path, builder, default):
    """``openvino,triton`` export of ``builder``'s model on a CPU whose default precision is ``default``."""
    model = builder(tmp_path / "m.onnx")
    real = ov_export.default_precision_note
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ov_export, "default_precision_note", functools.partial(real, default=default))
        result = api.export(api.load(model), "openvino,triton", tmp_path / "out", zip=False)
    notes = [n for t in ("openvino", "triton") for n in (*result.target(t).notes,
                                                          *(n for a in result.target(t).artifacts for n in a.notes))]
    return model, result, notes


def _plain_max_abs(model, xml, default):
    """What the simulated CPU's plain compile_model gives vs ONNX Runtime: its default precision, nothing else set."""
    feeds = random_feeds(input_specs(onnx.load(model)), seed=0)
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": default})(feeds)[0]
    exact = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                      "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0})(feeds)[0]
    return float(np.abs(np.asarray(got, np.float64) - want).max()), float(np.abs(np.asarray(exact, np.float64) - want).max())


@pytest.mark.parametrize("default", ["f32", "bf16"])
def test_int8_stored_weights_name_the_activation_quantization_on_either_cpu(tmp_path, default):
    model, result, notes = _export(tmp_path, _int8_weights_model, default)
    xml = result.bundle / "openvino" / "model.xml"
    said = [m for m in map(QUANTIZED.search, notes) if m]
    assert len(said) >= 2, notes                               # the IR's note and the target's, Triton's beside
    m = said[0]
    assert m.group(1) == "1"                                   # the model has one MatMul, on int8-stored weights
    pins = ("INFERENCE_PRECISION_HINT=f32 and " if default != "f32" else "") + "DYNAMIC_QUANTIZATION_GROUP_SIZE=0"
    assert m.group(2) == pins and m.group(5) == pins
    assert notes[notes.index(m.string)].startswith(
        "OpenVINO's default precision on this CPU is f32, but its" if default == "f32"
        else "OpenVINO's default precision on this CPU is bf16 and its")
    plain, exact = _plain_max_abs(model, xml, default)
    assert float(m.group(3)) == pytest.approx(plain, rel=5e-3)
    assert plain > 1e-2 and exact < 1e-4                       # the quantized activations really move it
    assert float(m.group(4)) == pytest.approx(exact, abs=1e-6)
    readme = (result.bundle / "triton" / "README.md").read_text()
    assert any(QUANTIZED.search(line) for line in readme.splitlines() if line.startswith("- `m_openvino`")), readme


def test_float_weights_on_an_f32_default_cpu_say_nothing(tmp_path):
    _, result, notes = _export(tmp_path, _matmul_model, "f32")
    assert not [n for n in notes if "default precision" in n or "quantizes" in n], notes
    assert "default precision" not in (result.bundle / "triton" / "README.md").read_text()


def test_float_weights_on_a_bf16_default_cpu_keep_the_precision_note_alone(tmp_path):
    _, _, notes = _export(tmp_path, _matmul_model, "bf16")
    said = [n for n in notes if n.startswith("OpenVINO's default precision on this CPU is bf16: compiled without "
                                             "INFERENCE_PRECISION_HINT=f32")]
    assert said and not [n for n in notes if "quantizes" in n], notes


def test_compressed_weight_matmuls_are_counted_from_the_ir(tmp_path):
    """int8-stored weights: 1 MatMul; f32 weights, and the same saved with FP16-compressed weights (f16 Const ->
    Convert, no integer): 0."""
    int8 = ov.convert_model(str(_int8_weights_model(tmp_path / "q.onnx")))
    ov.save_model(int8, str(tmp_path / "q.xml"), compress_to_fp16=False)
    floats = ov.convert_model(str(_matmul_model(tmp_path / "f.onnx")))
    ov.save_model(floats, str(tmp_path / "f.xml"), compress_to_fp16=False)
    ov.save_model(floats, str(tmp_path / "h.xml"), compress_to_fp16=True)
    assert ov_export.compressed_weight_matmuls(tmp_path / "q.xml") == 1
    assert ov_export.compressed_weight_matmuls(tmp_path / "f.xml") == 0
    assert ov_export.compressed_weight_matmuls(tmp_path / "h.xml") == 0
