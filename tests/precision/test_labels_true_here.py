"""Precision labels true to this CPU (issue 32 item 7): a variant is called bf16 only where the engine computes
in bf16 here, as the engine itself reports it (OpenVINO's compiled ``INFERENCE_PRECISION_HINT``), never from
the CPU's flags. On an AVX2-only CPU OpenVINO computes "bf16-ov" in f32: the precision flow recommended
"bf16-ov x0.98" for a real text detector there. Now such a row is named for what runs and never recommended.

Oracles: OpenVINO's own report, read here by a plain ``compile_model`` (not the studio's runner), and
hand-built rows for the AVX2 case (this machine has bf16, so its report is given to the labelling as an
AVX2 machine's engine would give it)."""

from __future__ import annotations

import pytest

from studio.precision.catalog import VARIANTS
from studio.precision.recommend import recommend, recommendable
from studio.precision.report import VariantResult
from studio.precision.variants import computed_precision, named_for_what_runs
from tests.conftest import SAMPLES
from tests.engine_facts import openvino_reduces_precision_by_default


def _row(name: str, ratio: float, **kw) -> VariantResult:
    spec = VARIANTS[name]
    return VariantResult(name, spec.label, spec.engine, spec.precision, "ok", latency_p10_ms=10.0 * ratio,
                         median_ms=10.0 * ratio, ratio=ratio, ratio_ci=(ratio - 0.02, ratio + 0.02) if ratio != 1.0
                         else None, ratio_rounds=6, cosine=0.9999, meets_target=True, **kw)


@pytest.mark.parametrize("report, computed", [("f32, pinned", "fp32"), ("bf16, pinned", "bf16"),
                                              ("f16, pinned", "fp16"), (None, "bf16")])
def test_bf16_variant_precision_is_the_engines_report(report, computed):
    assert computed_precision(VARIANTS["bf16-ov"], report) == computed
    # variants built in their precision are what they are; ORT reports no compute precision to read
    assert computed_precision(VARIANTS["int8-ov"], "f32, pinned") == "int8"
    assert computed_precision(VARIANTS["fp16"], report) == "fp16"


def test_int8_variant_is_int8_only_where_the_runtime_model_executes_int8():
    spec = VARIANTS["int8-ov"]
    assert computed_precision(spec, "f32, pinned", {"f32": 30, "u8": 10, "i8": 6, "i32": 2}) == "int8"
    assert computed_precision(spec, "f32, pinned", {"f32": 40, "i32": 2}) == "fp32"      # dequantized: float
    assert computed_precision(spec, "bf16, pinned", {"f32": 10, "bf16": 30}) == "bf16"
    assert computed_precision(spec, "f32, pinned", None) == "int8"                       # no report: as built
    # weight-only variants say "weights" in their names: int8 weights, float compute is what they are
    assert computed_precision(VARIANTS["int8-weights-ov"], "f32, pinned", {"f32": 40}) == "int8"
    row = _row("int8-ov", 0.5, details={"execution_precisions": {"f32": 40, "i32": 2}})
    named = named_for_what_runs(row, computed_precision(spec, "f32, pinned", {"f32": 40, "i32": 2}))
    assert named.precision == "fp32" and named.asked_precision == "int8" and not recommendable(named)
    assert any("execute in f32 40, i32 2" in n for n in named.notes)


def test_bf16_that_computes_f32_is_named_for_what_runs_and_never_recommended():
    fp32 = _row("fp32", 1.0)
    fp32_ov = _row("fp32-ov", 0.99)
    bf16 = _row("bf16-ov", 0.80)                # faster in this run, as drift can make a twin look
    assert recommendable(bf16)                  # as its name says bf16, it would have been recommended
    relabelled = named_for_what_runs(bf16, computed_precision(VARIANTS["bf16-ov"], "f32, pinned"))
    assert relabelled.precision == "fp32" and relabelled.asked_precision == "bf16"
    assert relabelled.label.startswith("fp32 · OpenVINO") and "bf16 not supported here" in relabelled.label
    assert "bf16" not in relabelled.label.split("(")[0]
    assert any("computes fp32 on this CPU" in n for n in relabelled.notes)
    assert not recommendable(relabelled)
    assert recommend([fp32, fp32_ov, relabelled]).name == "fp32"
    d = relabelled.to_dict()
    assert d["precision"] == "fp32" and d["asked_precision"] == "bf16"
    # where OpenVINO reports bf16, nothing changes
    same = named_for_what_runs(bf16, computed_precision(VARIANTS["bf16-ov"], "bf16, pinned"))
    assert same == bf16 and recommendable(same)


def _openvino_report(path, hint: str) -> tuple[str, dict[str, int]]:
    """OpenVINO's own report, by a plain compile_model: the compiled precision hint and how many runtime ops
    execute in each precision."""
    import collections

    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", {"INFERENCE_PRECISION_HINT": hint})
    counts = collections.Counter(op.get_rt_info()["runtimePrecision"].astype(str)
                                 for op in compiled.get_runtime_model().get_ops()
                                 if "runtimePrecision" in op.get_rt_info())
    return compiled.get_property("INFERENCE_PRECISION_HINT").to_string(), dict(counts)


def test_precision_flow_labels_bf16_as_openvino_computes_it_here(tmp_path):
    from studio import api

    src = SAMPLES / "cnn_unfused.onnx"
    report, _ = _openvino_report(src, "bf16")          # the engine's own word, asked directly
    expected = {"bf16": "bf16", "f32": "fp32", "f16": "fp16"}[report]
    result = api.precision(src, variants=["fp32-ov", "bf16-ov", "int8-ov"], samples=2, out_dir=tmp_path,
                           latency_budget_s=0.5)
    row = result.variant("bf16-ov")
    assert row.status == "ok", row.error
    assert row.precision == expected, (row.label, report)
    assert any(f"OpenVINO computed in {report}" in n for n in row.notes)
    if expected != "bf16":
        assert row.asked_precision == "bf16" and not row.recommended and "bf16" not in row.label.split("(")[0]
    else:
        assert row.asked_precision is None and row.label == VARIANTS["bf16-ov"].label
    # where OpenVINO's own default is f32 (tests.engine_facts), a bf16 request computes f32 too
    if not openvino_reduces_precision_by_default():
        assert row.precision == "fp32" and not row.recommended
    # the INT8 QDQ row: int8 exactly where OpenVINO's runtime model executes ops in i8/u8
    q = result.variant("int8-ov")
    assert q.status == "ok", q.error
    _hint, executed = _openvino_report(q.path, "f32")
    assert q.details["execution_precisions"] == executed
    int8_here = any(executed.get(k) for k in ("i8", "u8"))
    assert (q.precision == "int8") == int8_here and (q.asked_precision is None) == int8_here, (q.label, executed)
