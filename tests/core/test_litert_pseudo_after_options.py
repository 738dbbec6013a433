"""A file that an option set converted but that needs TensorFlow (Flex) ops is converted once more with those options
and onnx2tf's -rtpo for the ops. The search proposed -rtpo only from the defaults' file: refused with the defaults,
the -static file's FlexErf never met -rtpo. Corpus brainmaze_spindle_eeg (export --target litert --dim batch_size=1):
'onnx2tf fails at node .../ConvTranspose', converted with -static, then 'LiteRT cannot run model.tflite: ... TensorFlow
op(s) Erf'. Model built here: the FPN-like head of test_litert_static_shapes (its dynamic conversion refused at a
ConvTranspose) ending in Erf. Oracles: plain onnxruntime and a plain ai_edge_litert interpreter on the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from tests.core.test_litert_static_shapes import _head_model, _ort
from tests.requirements import require_engine


def _head_with_erf(path: Path) -> Path:
    model = onnx.load(str(_head_model(path)))
    assert model.graph.node[-1].op_type == "Sigmoid"
    model.graph.node[-1].op_type = "Erf"
    onnx.save(model, str(path))
    return path


def test_pseudo_ops_are_tried_with_the_options_that_converted(tmp_path):
    require_engine("litert")
    from ai_edge_litert.interpreter import Interpreter

    from studio.core.engines import get_engine
    from studio.core.engines.litert_convert import flex_ops

    model = _head_with_erf(tmp_path / "head_erf.onnx")
    x = np.random.default_rng(1).random((1, 3, 64, 64), dtype=np.float32)
    want = _ort(model, x)
    conv = get_engine("litert").convert(model, tmp_path / "out" / "head.tflite", shapes={"x": x.shape},
                                        reference={"x": x})
    assert conv.ok, conv.error
    tried = [tuple(a["options"]) for a in conv.attempts]
    assert tried[:2] == [(), ("-static",)], conv.attempts
    assert "Erf" in (conv.attempts[1]["error"] or ""), conv.attempts[1]      # -static alone: FlexErf
    assert conv.options == ("-rtpo", "Erf", "-static"), conv.attempts
    assert flex_ops(conv.artifact) == []
    # the file, run by LiteRT's own interpreter as the README says (NHWC in, NHWC out), gives ORT's numbers
    runner = Interpreter(model_path=str(conv.artifact)).get_signature_runner()
    (out,) = runner(x=np.moveaxis(x, 1, -1)).values()
    got = np.moveaxis(out, -1, 1)
    assert got.shape == want.shape and float(np.abs(got - want).max()) < 1e-4, float(np.abs(got - want).max())
