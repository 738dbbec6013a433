"""onnx2tf's refusals raised inside a traced TensorFlow function carry TensorFlow's traceback first ("in user code:
File .../onnx2tf.py, line 2617 ... raise e.with_traceback(filtered_tb)"); cut at 400 characters, the error said
nothing else. Corpus gutenye_ppocrv4_rec (export --target litert --dim p2o.DynamicDimension.0=1 --dim
p2o.DynamicDimension.1=320): 'onnx2tf fails: ValueError: in user code:\\n\\n    File "...onnx2tf.py", line 2617, in
None ...'; now 'onnx2tf fails: ValueError: Exception encountered when calling layer 'tf.linalg.matmul_1' (type
TFOpLambda). Dimensions must be equal, but are 15 and 1 with input shapes: ...'. Oracle: TensorFlow's own text
for a traced matmul of mismatched shapes, raised here."""

from __future__ import annotations

import pytest


def _tensorflow_error() -> str:
    """A matmul of mismatched shapes traced by tf.function, as onnx2tf traces its Keras model."""
    tf = pytest.importorskip("tensorflow")

    @tf.function(input_signature=[tf.TensorSpec([None, 3, 5]), tf.TensorSpec([None, 4, 5])])
    def product(a, b):
        return tf.linalg.matmul(a, b)

    try:
        product.get_concrete_function()
    except ValueError as exc:
        return str(exc)
    pytest.fail("TensorFlow traced a matmul of [3, 5] by [4, 5]")


def test_a_traced_tensorflow_error_keeps_its_words_not_its_traceback():
    from studio.core.engines.litert_convert import _exception_gist

    text = _tensorflow_error()
    gist = _exception_gist(text)
    assert "in user code:" in text and "Dimensions must be equal" in text, text      # TensorFlow's form
    assert gist.startswith("ValueError: Dimensions must be equal"), gist
    assert "\n" not in gist and "File " not in gist and len(gist) < 400, gist
    assert "{{node" not in gist
    assert _exception_gist("plain words") == "plain words"      # no traceback: as it was
