"""The op signature comes from the model (attributes, ports, captured inputs, reference outputs), and the
reference registry covers the GridSample family in every mode, padding and align_corners, 4-D and 5-D."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from diagnostics.reference_ops import grid_sample, reference_evaluator
from studio import api
from studio.core.errors import StudioError
from studio.plugins.reference import get_reference, references
from tests.conftest import SAMPLES, save
from tests.plugins.plugin_models import MMDEPLOY, all_modes_model, unknown_op_model


def test_signature_of_the_mmdeploy_sample(mm_sig):
    assert (mm_sig.domain, mm_sig.op_type, mm_sig.custom) == ("mmdeploy", "grid_sampler", True)
    assert [p.name for p in mm_sig.inputs] == ["input", "grid"]
    assert [p.dtype for p in mm_sig.inputs] == ["float32", "float32"]
    assert mm_sig.inputs[0].shapes == ((1, 4, 16, 16),) and mm_sig.outputs[0].shapes == ((1, 4, 8, 8),)
    assert {a.name: a.values for a in mm_sig.attributes} == {"align_corners": (0,), "interpolation_mode": (0,),
                                                              "padding_mode": (0,)}
    assert mm_sig.known["fix_pass"] == "legalize-grid-sampler"
    sample = mm_sig.samples[0]
    assert sample.inputs[0].shape == (1, 4, 16, 16) and sample.outputs[0].shape == (1, 4, 8, 8)
    # The captured input is the Relu output: non-negative, not the raw feed.
    assert float(sample.inputs[0].min()) >= 0.0
    # Whole-model expected outputs agree with the onnx reference evaluator on the same feeds.
    expected = reference_evaluator(onnx.load(MMDEPLOY)).run(None, mm_sig.model_feeds)[0]
    np.testing.assert_allclose(mm_sig.model_outputs["output"], expected, rtol=1e-5, atol=1e-6)
    assert mm_sig.to_dict()["samples"][0]["outputs"][0]["shape"] == [1, 4, 8, 8]


def test_all_nodes_captured_with_their_own_attributes(tmp_path):
    path = save(all_modes_model(), tmp_path / "modes.onnx")
    sig = api.plugin_signature(api.load(path), "mmdeploy::grid_sampler", capture=True)
    assert len(sig.nodes) == 18
    assert {a.name: len(a.values) for a in sig.attributes} == {"align_corners": 2, "interpolation_mode": 3,
                                                                "padding_mode": 3}
    assert len(sig.samples) == 4 and any("first 4 of 18" in n for n in sig.notes)
    for s in sig.samples:
        ref = get_reference("mmdeploy", "grid_sampler")(s.inputs, s.attrs)[0]
        np.testing.assert_array_equal(s.outputs[0], ref)


def test_unknown_op_has_a_static_signature_and_no_reference(tmp_path):
    path = save(unknown_op_model(), tmp_path / "unknown.onnx")
    sig = api.plugin_signature(api.load(path), "acme::Swizzle")
    assert sig.reference is None and sig.model_outputs is None
    assert {a.name: a.type for a in sig.attributes} == {"alpha": "float", "axes": "ints", "tag": "string"}
    assert sig.inputs[0].dtype == "float32" and sig.inputs[0].shapes == ((2, 3),)
    assert len(sig.samples) == 1 and sig.samples[0].outputs is None   # inputs captured, nothing to compare


def test_op_inside_a_chain_of_custom_ops_is_noted(tmp_path):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Swizzle", ["x"], ["a"], domain="acme"),
             helper.make_node("grid_sampler", ["a", "g"], ["y"], domain="mmdeploy")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4]),
                                               helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 2, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("acme", 1),
                                                    helper.make_opsetid("mmdeploy", 1)])
    sig = api.plugin_signature(api.load(save(model, tmp_path / "chain.onnx")), "grid_sampler")
    assert not sig.samples
    assert any("another custom op (acme::Swizzle)" in n for n in sig.notes)
    assert any("other custom ops" in n for n in sig.notes)


@pytest.mark.parametrize("op,message", [("mmdeploy::nope", "is not in the model; custom ops in the model: "
                                                               "mmdeploy::grid_sampler"),
                                        ("", "name the op as DOMAIN::OP_TYPE"),
                                        ("mmdeploy::", "has no op type")])
def test_bad_op_names(mm_handle, op, message):
    with pytest.raises(StudioError, match=message.replace("(", r"\(")):
        api.plugin_signature(mm_handle, op, capture=False)


def test_standard_op_can_be_named_too():
    sig = api.plugin_signature(api.load(SAMPLES / "gridsample_5d.onnx"), "ai.onnx::GridSample")
    assert not sig.custom and sig.samples and sig.samples[0].inputs[1].shape[-1] == 3
    assert sig.samples[0].outputs is not None   # the 5-D reference ran


def test_registry_covers_the_gridsample_family():
    keys = {(r.domain, r.op_type) for r in references()}
    assert {("mmdeploy", "grid_sampler"), ("mmcv", "grid_sampler"), ("com.microsoft", "GridSample"),
            ("", "GridSample")} <= keys
    assert get_reference("ai.onnx", "GridSample") is get_reference("", "GridSample")
    rng = np.random.default_rng(1)
    x4, g4 = rng.standard_normal((1, 2, 5, 6)).astype(np.float32), rng.uniform(-1.3, 1.3, (1, 3, 4, 2)).astype(np.float32)
    x5, g5 = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32), rng.uniform(-1.3, 1.3, (1, 2, 3, 4, 3)).astype(np.float32)
    mm, ms, std = get_reference("mmdeploy", "grid_sampler"), get_reference("com.microsoft", "GridSample"), \
        get_reference("", "GridSample")
    for mode_i, mode in enumerate(("bilinear", "nearest", "bicubic")):
        for pad_i, pad in enumerate(("zeros", "border", "reflection")):
            for align in (0, 1):
                want = grid_sample(x4, g4, mode, pad, align)
                attrs = {"interpolation_mode": mode_i, "padding_mode": pad_i, "align_corners": align}
                np.testing.assert_array_equal(mm([x4, g4], attrs)[0], want)
                np.testing.assert_array_equal(ms([x4, g4], {"mode": mode, "padding_mode": pad,
                                                            "align_corners": align})[0], want)
                if mode != "bicubic":
                    np.testing.assert_array_equal(mm([x5, g5], attrs)[0], grid_sample(x5, g5, mode, pad, align))
    assert std([x5, g5], {"mode": "linear"})[0].shape == (1, 2, 2, 3, 4)
    with pytest.raises(ValueError, match="0, 1 or 2"):
        mm([x4, g4], {"interpolation_mode": 7})
