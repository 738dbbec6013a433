"""Edits tell the whole truth on the Graph page (issue 33 item 3): the delete note counts every node
it removes (consistent with "Removes N nodes"), lists say "and N more" instead of stopping, shapes are
numbers when the model's dims are set, and the verification line is whole, without a stray "(none)".

Oracles: the graph itself walked with plain onnx (which nodes still reach a kept output), and the
decoder's shapes worked out by hand from its dims (present = past + sequence)."""

from __future__ import annotations

import onnx
import pytest

from studio import api
from studio.ui import edit_panel
from tests.conftest import SAMPLES

DECODER = SAMPLES / "gpt2_decoder_with_past.onnx"


def _kept_by_hand(model: onnx.ModelProto, outputs: set[str]) -> int:
    """Nodes of the main graph on a path to one of ``outputs`` (a reverse walk over plain onnx)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    seen: set[int] = set()
    todo = [producer[o] for o in outputs if o in producer]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        todo += [producer[i] for i in n.input if i in producer]
    return len(seen)


def test_delete_note_counts_what_the_preview_removes():
    m = onnx.load(DECODER)
    kept = {o.name for o in m.graph.output} - {"logits"}
    removed_by_hand = len(m.graph.node) - _kept_by_hand(m, kept)
    result = api.validate_edit_script(api.load(DECODER), [{"op": "delete", "node": "/lm_head/MatMul"}])
    assert len(result.nodes_removed) == removed_by_hand == 37
    (note,) = result.notes
    # was: "deleted node '/lm_head/MatMul' and 0 nodes after it" beside "Removes 37 nodes"
    assert "and 0 nodes after it, and 36 nodes before it that only fed them" in note


def test_lists_are_complete_and_the_verification_is_one_whole_sentence():
    names = [f"n{i}" for i in range(100)]
    assert edit_panel.name_list(names) == ", ".join(names[:40]) + " and 60 more"
    assert edit_panel.name_list(names[:3]) == "n0, n1, n2"
    from studio.core.compare import Verification, VerifyStatus

    reason = "values change on purpose (input 'images' float[batch,3,height,width] pinned to float[1,3,640,640])"
    text = edit_panel.verification_text(Verification(VerifyStatus.SKIPPED, "numbers not compared: the script changes "
                                                     "values on purpose", reason=reason, method="none"))
    assert text == f"Verification skipped: {reason}: numbers not compared: the script changes values on purpose"
    assert "(none)" not in text and "…" not in text
    assert "(numeric)" in edit_panel.verification_text(Verification("passed", "max abs diff 0"))


@pytest.mark.slow
def test_delete_preview_on_the_page_is_whole_and_numeric(app):
    """The Graph page's preview of a delete on the decoder, its dims set to batch 1, sequence 5, past 7:
    every removed node counted (the list ends "and N more"), the outputs' shapes as numbers."""
    at = app(str(DECODER)).run()
    at.session_state["onnx_studio_dims"] = {"batch_size": 1, "sequence_length": 5, "past_sequence_length": 7}
    at.switch_page("views/graph.py").run()
    node = next(n.id for n in api.graph_index(api.load(DECODER)).graph.nodes if n.name == "/lm_head/MatMul")
    at.session_state["selected_node"] = node
    at.run()
    at.radio(key="graph_viewer_edit_action").set_value("Delete with what follows").run()
    at.button(key="graph_viewer_edit_preview").click().run()
    assert not at.exception, at.exception
    text = " ".join(m.value for m in at.markdown).replace("\\", "")
    assert "Removes 37 nodes" in text and "and 36 nodes before it that only fed them" in text
    removed = api.validate_edit_script(api.load(DECODER), [{"op": "delete", "node": "/lm_head/MatMul"}]).nodes_removed
    shown = text[text.index("Removes 37 nodes"):]
    assert all(name in shown for name in removed)                       # 37 < 40: every one listed
    # outputs before -> after at the dims: numbers (1, 5, 7 + 5 = 12), not the exporter's formula
    assert "logits: float[1,5,288]" in text and "present.0.key: float[1,4,12,8]" in text
    assert "past_sequence_length + sequence_length" not in text


def test_extract_says_what_happens_to_the_source_metadata(tmp_path):
    """The extracted part of the detector keeps or drops its 7 metadata properties (task=detect, imgsz...)
    as the script says, and the note names them; a cut that leaves a graph input unused is refused."""
    det = api.load(SAMPLES / "yolo_detector.onnx")
    source = {p.key: p.value for p in det.proto.metadata_props}
    assert source["task"] == "detect" and len(source) == 7
    cut = {"op": "extract", "inputs": ["images"], "outputs": ["/model.1/act/Mul_output_0"]}
    kept = api.edit(det, [cut], tmp_path / "kept.onnx")
    dropped = api.edit(det, [{**cut, "metadata": "drop"}], tmp_path / "dropped.onnx")
    assert {p.key: p.value for p in onnx.load(kept.outputs[0]).metadata_props} == source
    assert not onnx.load(dropped.outputs[0]).metadata_props
    assert "metadata kept (7 properties: description, author, task" in kept.notes[0]
    assert "metadata dropped (7 properties" in dropped.notes[0]
    with pytest.raises(Exception, match="metadata is 'keep' or 'drop'"):
        api.validate_edit_script(det, [{**cut, "metadata": "maybe"}])
    with pytest.raises(Exception, match="'images' is not on any path to the chosen outputs"):
        api.validate_edit_script(det, [{"op": "extract", "inputs": ["images", "/model.0/act/Mul_output_0"],
                                        "outputs": ["/model.1/act/Mul_output_0"]}])


@pytest.mark.slow
def test_extract_on_the_page_asks_about_the_metadata(app):
    det = SAMPLES / "yolo_detector.onnx"
    at = app(str(det)).run()
    at.switch_page("views/graph.py").run()
    at.session_state["selected_node"] = next(n.id for n in api.graph_index(api.load(det)).graph.nodes
                                             if n.name == "/model.1/act/Mul")
    at.run()
    at.radio(key="graph_viewer_edit_action").set_value("Extract from here").run()
    assert not at.exception, at.exception
    assert "graph_viewer_edit_preview" not in [b.key for b in at.button]        # no silent default
    (choice,) = [r for r in at.radio if r.label.startswith("The source's metadata (7 properties")]
    choice.set_value("drop").run()
    at.button(key="graph_viewer_edit_preview").click().run()
    assert not at.exception, at.exception
    text = " ".join(m.value for m in at.markdown).replace("\\", "")
    assert "metadata dropped (7 properties" in text


def test_pinning_a_free_dim_is_verified_at_the_pinned_size(tmp_path):
    """Pinning the detector's height and width to 640 changes no value: verified numerically at 640 (was
    "skipped: values change on purpose"); the oracle is plain ORT on the original and the edit at 640."""
    import numpy as np

    from tests.conftest import ort_reference

    det = SAMPLES / "yolo_detector.onnx"
    res = api.edit(api.load(det), [{"op": "set_input", "input": "images", "dims": {"height": 640, "width": 640}}],
                   tmp_path / "pinned.onnx")
    v = res.verification
    assert (v.status, v.method) == ("passed", "numeric") and v.message.startswith("at height=640, width=640")
    edited = onnx.load(res.outputs[0])
    assert [d.dim_value or d.dim_param for d in edited.graph.input[0].type.tensor_type.shape.dim] == \
        ["batch", 3, 640, 640]
    x = {"images": np.random.default_rng(0).random((1, 3, 640, 640), dtype=np.float32)}
    np.testing.assert_array_equal(ort_reference(res.outputs[0], x)["output0"], ort_reference(det, x)["output0"])
