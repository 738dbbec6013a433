"""The user's journey in a real browser, one page after another:

upload the PyTorch-style CNN -> overview -> compatibility -> a fix applied from the page
(the CNN has no error finding, so the mmdeploy sample supplies the fix step) -> back to the
CNN, optimize with the safe preset -> the diff on the Graph page -> [profile] -> export all
-> download the bundle and check its manifest. A screenshot of every step.

It checks everything test_upload_inspect, test_optimize_browser and test_compatibility_fix check (those
are marked ``covered_by`` this test: deselected when it runs, so a whole run does that work once).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import time
import zipfile

import pytest

from tests.conftest import SAMPLES
from tests.e2e.conftest import nodes_metric, open_and_upload, wait_for_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _goto(page, name: str) -> None:
    page.get_by_role("link", name=name, exact=True).click()
    page.get_by_role("heading", name=name).wait_for()
    wait_for_app(page)


def _choose(page, selectbox, text: str) -> None:
    """Pick an option of a Streamlit selectbox (its list opens on click; a click that lands
    during a rerun is retried)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(5):
        wait_for_app(page)
        try:
            selectbox.click(timeout=10_000)
            page.get_by_role("option").filter(has_text=text).first.click(timeout=10_000)
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
            continue
        wait_for_app(page)
        return
    raise AssertionError(f"option {text!r} never appeared")


def _wait_version(page, vid: str) -> None:
    """Wait until the sidebar's version picker shows ``vid`` (the run that selected it has finished)."""
    picker = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"] input').last
    deadline = time.monotonic() + 90
    while not picker.input_value().startswith(f"{vid} "):
        if time.monotonic() > deadline:
            raise AssertionError(f"version {vid} never became current ({picker.input_value()!r})")
        time.sleep(0.2)
    wait_for_app(page)


def test_upload_to_exported_bundle(shared_studio, page, shots):
    from playwright.sync_api import expect

    server = shared_studio
    # 1. Upload the CNN and see the overview.
    open_and_upload(page, server.url, str(SAMPLES / "cnn_unfused.onnx"))
    nodes_metric(page, "37")
    page.get_by_text("Op histogram").first.wait_for()
    shots(page, "01-overview")

    # 2. Check compatibility: the CNN runs on ONNX Runtime and OpenVINO.
    _goto(page, "Compatibility")
    page.get_by_text("runs").first.wait_for(timeout=120_000)
    assert page.get_by_text("❌ fails").count() == 0
    shots(page, "02-compatibility")

    # 3. A fix applied from the page: the mmdeploy sample's custom op, legalized to GridSample.
    _goto(page, "Overview")
    page.get_by_text("Open a model").first.click()
    page.get_by_role("tab", name="Sample model").click()
    wait_for_app(page)
    picker = page.locator('[data-testid="stSelectbox"]').filter(has_text="Sample").first
    _choose(page, picker, "mmdeploy_grid_sampler")
    expect(picker.locator("input")).to_have_value(re.compile(r"^mmdeploy_grid_sampler "))   # the pick took
    page.get_by_role("button", name="Open sample").click()
    page.get_by_text("Custom ops: mmdeploy::grid_sampler").wait_for(timeout=90_000)
    _wait_version(page, "v0")                 # a second model: its own version tree
    _goto(page, "Compatibility")
    page.get_by_text("❌ fails").first.wait_for(timeout=120_000)
    page.get_by_text("ORT-NO-KERNEL").first.wait_for()
    page.get_by_role("button", name="Fix: legalize-grid-sampler").click()
    page.get_by_text("Applied").first.wait_for(timeout=180_000)
    wait_for_app(page)
    page.get_by_text("✅ runs").first.wait_for(timeout=120_000)
    assert page.get_by_text("❌ fails").count() == 0
    assert page.get_by_role("button", name="Fix: legalize-grid-sampler").count() == 0
    _wait_version(page, "v1")
    shots(page, "03-fix-applied")

    # 4. Back to the CNN (the first model of the project); optimize it with the safe preset.
    _choose(page, page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').first, "cnn_unfused")
    _wait_version(page, "v0")
    _goto(page, "Optimize")
    page.get_by_role("button", name="Run").click()
    page.get_by_text("Saved as version v1").wait_for(timeout=180_000)
    page.get_by_text("passes changed the model").first.wait_for()
    page.get_by_text("Op counts that changed").wait_for()
    page.locator('[data-testid="stDataFrame"]').first.wait_for()          # the optimize report
    page.get_by_text("Equivalent CLI command").first.wait_for()          # drawn after the report, same run
    _wait_version(page, "v1")
    shots(page, "04-optimized")

    # 5. The diff on the Graph page: v0 -> v1, the batch norms folded away.
    _goto(page, "Graph")
    page.get_by_text("Diff", exact=True).click()
    removed = page.locator('[data-testid="stMetric"]').filter(has_text="Removed")
    removed.wait_for(timeout=90_000)
    assert int(removed.inner_text().split()[-1]) > 0
    shots(page, "05-diff")

    # 6. Profile the original (v0) against the optimized version (v1), side by side.
    _goto(page, "Profile")
    chosen = page.locator('[data-testid="stMultiSelect"]').first
    assert "v0" in chosen.inner_text() and "v1" in chosen.inner_text() and "v2" not in chosen.inner_text()
    page.get_by_role("button", name="Run profile").click()
    page.get_by_text("Ratios against the baseline").wait_for(timeout=180_000)
    wait_for_app(page)
    page.locator("text=Latency per inference").first.wait_for()
    shots(page, "06-profile")

    # 7. Export all from the Export page.
    _goto(page, "Export")
    page.get_by_role("button", name="Export", exact=True).click()
    page.get_by_text("Every artifact that can run here was reloaded").wait_for(timeout=300_000)
    page.get_by_text("Equivalent CLI command").first.wait_for()
    shots(page, "07-exported")

    # 8. Download the bundle and check its manifest.
    with page.expect_download(timeout=120_000) as info:
        page.get_by_role("button", name="Download the bundle").click()
    download = info.value
    assert download.suggested_filename.startswith("cnn_unfused-") and download.suggested_filename.endswith(".zip")
    data = open(download.path(), "rb").read()
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        top = download.suggested_filename[:-4]
        manifest = json.loads(z.read(f"{top}/manifest.json"))
        assert manifest["ok"] is True and manifest["failures"] == []
        assert manifest["deploy"]["same_as_source"] is True
        assert {t: v["status"] for t, v in manifest["targets"].items()} == {
            "onnxruntime": "passed", "openvino": "passed", "tensorrt": "not verified", "triton": "passed"}
        # The exported model is the optimized version (v1): no BatchNormalization left.
        assert "BatchNormalization" not in manifest["source"]["opsets"] and manifest["source"]["name"].endswith(".onnx")
        assert manifest["files"]
        for f in manifest["files"]:
            assert hashlib.sha256(z.read(f"{top}/{f['path']}")).hexdigest() == f["sha256"]
        assert f"{top}/onnxruntime/model.onnx" in z.namelist() and f"{top}/report.html" in z.namelist()
    shots(page, "08-downloaded")
    assert server.alive()
