"""Graph surgery in a real Chromium (issue 27's browser test): open the detector, click a node in
the viewer, bypass it (previewed, verified, saved as a version), see the edit in the diff; then
add an output at an inner tensor and compare its values with the original's intermediate values
computed here with plain onnxruntime (the tensor exposed by hand with onnx.helper)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest

from studio import api
from tests.conftest import SAMPLES, ort_reference, save
from tests.e2e.conftest import click_viewer_node, ready_viewer, wait_for_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STRAY = "stray_identity"
INNER = "/model.0/conv/Conv"


def _detector_with_a_stray_identity(tmp_path):
    """The detector sample as exporters often leave it: an Identity between the input and the stem."""
    m = onnx.load(str(SAMPLES / "yolo_detector.onnx"))
    x = m.graph.input[0].name
    for n in m.graph.node:
        for i, name in enumerate(n.input):
            if name == x:
                n.input[i] = f"{x}_id"
    m.graph.node.insert(0, onnx.helper.make_node("Identity", [x], [f"{x}_id"], name=STRAY))
    return save(m, tmp_path / "detector.onnx")


def _click_node(page, frame, key: str) -> None:
    """Find the node (its groups open, it is centred), then click it as a user would."""
    frame.fill(".gv-toolbar input", key)
    frame.press(".gv-toolbar input", "Enter")
    frame.wait_for_function(f"() => __graph.selected() === {key!r} && __graph.ready()", timeout=60_000)
    click_viewer_node(page, frame, key)                      # reports above the viewer may push it down


def _radio(page, text: str) -> None:
    page.get_by_test_id("stRadioOption").filter(has_text=re.compile(f"^\\s*{re.escape(text)}\\s*$")).first.click()


def _preview_and_apply(page, expect: str) -> None:
    page.get_by_role("button", name="Preview").click()
    page.get_by_text(expect).first.wait_for(timeout=120_000)
    page.get_by_role("button", name="Apply as a new version").click()


def _versions(server):
    [p] = server.projects()              # the one project this test made
    [m] = api.project_models(p.id)
    return api.project_model(p.id, m.id)


def test_bypass_diff_and_add_output_from_the_graph_page(shared_studio, page, shots, tmp_path):
    src = _detector_with_a_stray_identity(tmp_path)
    server = shared_studio
    page.goto(server.url + server.preload(src))
    wait_for_app(page)
    page.get_by_role("link", name="Graph", exact=True).click()
    page.get_by_role("heading", name="Graph").wait_for()
    frame = ready_viewer(page)
    # 1. Click the stray Identity, bypass it: the preview lists it, the version is verified and saved.
    _click_node(page, frame, STRAY)
    page.get_by_role("heading", name=f"Identity · {STRAY}", exact=True).wait_for(timeout=60_000)
    _radio(page, "Bypass")
    page.get_by_text("Show as script").click()
    page.get_by_text('"op": "bypass"').first.wait_for()
    page.get_by_text("onnx-studio edit detector.onnx --script edits.json -o edited.onnx").first.wait_for()
    _preview_and_apply(page, "Removes 1 nodes")
    assert page.get_by_text(f"{STRAY} (Identity)").count() >= 1
    page.get_by_text("Saved as version v1").wait_for(timeout=180_000)
    page.get_by_text("Verification passed (numeric)").wait_for()
    shots(page, "edit-bypass-saved")
    ws = _versions(server)
    v1 = ws.version("v1")
    assert v1.parent == "v0" and v1.provenance["edit"]["script"] == [{"op": "bypass", "node": STRAY}]
    assert STRAY not in [n.name for n in onnx.load(ws.handle("v1").path).graph.node]
    # 2. The diff view opens on v1 against its parent: the Identity is the one removed node.
    page.get_by_role("button", name="See it in the diff").click()
    diff = ready_viewer(page, "__graph.viewer.model.s.leaves.some(l => l.status === 'removed')")
    removed = diff.evaluate("__graph.viewer.model.s.leaves.filter(l => l.status === 'removed').map(l => l.key)")
    assert removed == [f"removed:{STRAY}"], removed         # the diff keys a removed node "removed:<name>"
    shots(page, "edit-bypass-diff")
    # 3. Back on the viewer (now v1): add an output at an inner tensor of the stem.
    _radio(page, "Graph")
    frame = ready_viewer(page, f"__graph.viewer.model.s.leaves.every(l => !l.status && l.key !== {STRAY!r})")
    _click_node(page, frame, INNER)
    page.get_by_role("heading", name=f"Conv · {INNER}", exact=True).wait_for(timeout=60_000)
    _radio(page, "Add output here")
    _preview_and_apply(page, "the script applies")
    page.get_by_text("Saved as version v2").wait_for(timeout=180_000)
    page.get_by_text("Verification passed (reproduce)").wait_for()
    shots(page, "edit-add-output")
    ws = _versions(server)
    v2 = ws.version("v2")
    tensor = next(n.output[0] for n in onnx.load(src).graph.node if n.name == INNER)
    assert v2.parent == "v1" and v2.provenance["edit"]["script"] == [{"op": "add_output", "tensor": tensor}]
    feeds = {"images": np.random.default_rng(5).uniform(size=(1, 3, 64, 64)).astype(np.float32)}
    exposed = onnx.load(src)
    exposed.graph.output.append(onnx.helper.make_empty_tensor_value_info(tensor))
    want = ort_reference(exposed, feeds)
    got = ort_reference(ws.handle("v2").path, feeds)
    assert [o.name for o in onnx.load(ws.handle("v2").path).graph.output] == ["output0", tensor]
    np.testing.assert_allclose(got[tensor], want[tensor], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["output0"], want["output0"], rtol=1e-5, atol=1e-5)
    assert server.alive()
