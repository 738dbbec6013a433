"""precision --dataset --target top1-agreement>=0.99 on a real 2-class classifier (Caffe-style NHWC,
[N, 2] softmax) and a 1000-class one, on the bundled photos: judged by top-1 agreement (checked
against plain onnxruntime), fp32 meets it, the recommendation met it or there is honestly none, and
a target that applies to no output is refused before any work (R49)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from sample_models.catalog import get, path_of
from studio import api
from studio.cli import main
from studio.core.errors import StudioError
from studio.data.datasets import dataset_feeds

TARGET = "top1-agreement>=0.99"


@pytest.fixture(scope="module")
def project(module_projects_root):
    p = api.create_project("tasks")
    photos = api.sample_photos_folder()
    caffe = path_of("caffe_classifier")
    recipe = api.preprocessing_recipe(file=caffe.parent / get("caffe_classifier").recipe_file)
    api.add_dataset(p, photos, name="caffe", model=api.load(caffe), recipe=recipe, calibration_fraction=0.5)
    api.add_dataset(p, photos, name="imagenet", model=api.load(path_of("imagenet_classifier")),
                    calibration_fraction=0.5)
    return p


def _top1(path, feeds) -> np.ndarray:
    """The oracle: argmax of the single output over the class axis, plain onnxruntime."""
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.array([int(np.argmax(s.run(None, f)[0].reshape(-1))) for f in feeds])


@pytest.mark.slow
@pytest.mark.parametrize("sample,dataset,classes", [("caffe_classifier", "caffe", 2),
                                                    ("imagenet_classifier", "imagenet", 1000)])
def test_precision_judges_by_top1_agreement_and_recommends_honestly(project, tmp_path, sample, dataset, classes):
    model = path_of(sample)
    ds = api.dataset(project, dataset)
    (task,) = api.output_tasks(api.load(model))
    assert task.kind == "classification" and task.classes == classes, task.text()
    report = api.precision(model, variants=["fp32", "int8", "int8-dynamic"], dataset=ds, target=TARGET,
                           latency_budget_s=0.5, out_dir=tmp_path / "v")
    by = {v.name: v for v in report.variants}
    assert report.target == TARGET and not report.is_estimate
    fp32 = by["fp32"]
    assert fp32.meets_target and fp32.task["target_value"] == 1.0, (fp32.notes, fp32.task)
    (out,) = fp32.task["outputs"]
    assert out["task"] == "classification" and "top1-agreement" in [m["metric"] for m in out["metrics"]]
    # every judged variant's figure is the top-1 agreement plain onnxruntime gives on the same samples
    feeds = dataset_feeds(ds, api.load(model).proto, part="evaluation", limit=64)
    reference = _top1(model, feeds)
    judged = [v for v in report.variants if v.task is not None and v.path is not None and v.path.suffix == ".onnx"]
    assert judged, [(v.name, v.status, v.error) for v in report.variants]
    for v in judged:
        oracle = float(np.mean(_top1(v.path, feeds) == reference))
        assert v.task["target_value"] == pytest.approx(oracle), v.name
        assert v.meets_target == (oracle >= 0.99), (v.name, oracle, v.notes)
    summary = report.summary()
    assert "no variant could be measured" not in summary
    if report.recommended is None:
        assert summary.startswith("nothing recommended"), summary
    else:
        chosen = by[report.recommended]
        assert chosen.meets_target and chosen.recommended
        assert report.recommended == "fp32" or "top1-agreement" in summary
    assert "target missed" not in " ".join(fp32.notes)


def test_a_target_no_output_has_is_refused_before_any_work(project, capsys, monkeypatch):
    monkeypatch.setenv("ONNX_STUDIO_PROJECTS_ROOT", str(project.root.parent))     # the CLI finds the project
    model = path_of("caffe_classifier")
    ds = api.dataset(project, "caffe")
    golden = ds.folder / "golden"
    before = sorted(golden.iterdir()) if golden.is_dir() else []
    # Nothing was built or run: no job reaches a sandbox worker (every engine run and conversion is one).
    import studio.core.sandbox.protocol as protocol

    jobs: list[str] = []
    exchange = protocol._exchange
    monkeypatch.setattr(protocol, "_exchange", lambda pool, worker, request, **kw: (
        jobs.append(str(request.get("job", request))[:80]), exchange(pool, worker, request, **kw))[1])
    with pytest.raises(StudioError) as err:
        api.precision(model, variants=["fp32", "int8"], dataset=ds, target="top5-agreement>=0.99")
    msg = str(err.value)
    assert "\n" not in msg and "applies to no output" in msg and "'prob' is classification" in msg
    assert "top1-agreement" in msg and "--task prob=KIND" in msg
    with pytest.raises(StudioError, match="applies to no output"):
        api.evaluate_on_dataset(ds, model, target="mask-iou>=0.9")
    with pytest.raises(StudioError, match="applies to no output"):
        api.compare(model, model, dataset=ds, target="map-drop<=0.01")
    assert jobs == []                                            # nothing was built or run
    assert (sorted(golden.iterdir()) if golden.is_dir() else []) == before      # no golden outputs made
    code = main(["precision", str(model), "--project", project.id, "--dataset", "caffe",
                 "--target", "cer<=0.01"])
    err_text = capsys.readouterr().err
    assert code == 2 and "target cer<=0.01 applies to no output" in err_text


def test_data_eval_task_is_stored_in_the_project_and_reused(project, capsys, monkeypatch):
    monkeypatch.setenv("ONNX_STUDIO_PROJECTS_ROOT", str(project.root.parent))
    model = str(path_of("caffe_classifier"))
    base = ["data", "eval", "caffe", "--project", project.id, "--model", model, "--limit", "2"]
    assert main([*base, "--task", "prob=regression", "--json"]) == 0
    import json

    first = json.loads(capsys.readouterr().out)
    assert first["outputs"][0]["task"] == "regression" and "set by --task" in first["outputs"][0]["task_reason"]
    assert api.stored_output_tasks(project, api.load(model)) == {"prob": "regression"}
    assert main([*base, "--json"]) == 0                          # no --task: the stored choice
    again = json.loads(capsys.readouterr().out)
    assert again["outputs"][0]["task"] == "regression"
    assert [m["metric"] for m in again["outputs"][0]["metrics"]] == ["cosine", "max-abs", "max-rel"]
    assert main([*base, "--task", "prob=auto", "--target", TARGET]) == 0     # forgotten: inferred again
    out = capsys.readouterr().out
    assert "(classification)" in out and "softmax over the last axis" in out and "met" in out
    assert api.stored_output_tasks(project, api.load(model)) == {}
    assert main([*base, "--task", "prob=classifier"]) == 2
    assert "the task is one of classification" in capsys.readouterr().err


def test_integer_only_outputs_get_no_cosine_that_was_never_measured(tmp_path):
    """R52: an ArgMax-only classifier has no float output: the cosine is n/a with the reason, never 1.0."""
    import json

    import onnx
    from onnx import TensorProto as T, helper, numpy_helper as nh

    w = nh.from_array(np.random.default_rng(0).normal(size=(4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("GlobalAveragePool", ["c"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("ArgMax", ["f"], ["cls"], axis=1, keepdims=0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("cls", T.INT64, [1])], [w])
    path = tmp_path / "argmax.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    report = api.precision(path, variants=["fp32"], latency_budget_s=1)
    fp32 = report.variant("fp32")
    assert fp32.cosine is None and fp32.meets_target
    assert any("cosine n/a" in n for n in fp32.notes), fp32.notes
    json.loads(json.dumps(report.to_dict(), default=str, allow_nan=False))
    result = api.compare(path, path, engine="ort", engine_b="openvino")
    (diff,) = result.comparison.outputs.values()
    assert diff.cosine is None and diff.mode == "exact" and diff.task == "classification"
    assert "cosine" not in result.summary()


def test_no_summary_contradicts_its_table():
    from studio.precision.report import PrecisionReport, VariantResult

    def v(name, status="ok", meets=False, value=None, notes=(), error=None):
        task = {"target_value": value, "notes": list(notes)}
        return VariantResult(name, name, "onnxruntime", "fp32", status, latency_p10_ms=1.0, meets_target=meets,
                             task=task, error=error)

    def report(*variants):
        return PrecisionReport(tuple(variants), None, {}, 0.99, "", {}, "cnn", None, target=TARGET,
                               basis="dataset photos")

    missed = report(v("fp32", value=None, notes=["target metric top1-agreement is n/a: no sample ran"]),
                    v("int8", value=0.5))
    text = missed.summary()
    assert "could not be measured" not in text
    assert text.startswith("nothing recommended: even fp32 misses top1-agreement>=0.99 (got n/a: target metric")
    assert "2 variant(s) measured" in text
    assert report(v("fp32", value=0.9), v("int8", value=0.5)).summary().startswith(
        "nothing recommended: even fp32 misses top1-agreement>=0.99 (got 0.9)")
    failed = report(v("fp32", status="failed", error="boom"), v("int8", status="failed", error="boom"))
    assert failed.summary() == "no variant could be measured: boom"


def test_an_empty_evaluation_part_is_na_with_the_reason(project):
    import json

    model = path_of("caffe_classifier")
    recipe = api.preprocessing_recipe(file=model.parent / get("caffe_classifier").recipe_file)
    ds = api.add_dataset(project, api.sample_photos_folder(), name="all-calibration", model=api.load(model),
                         recipe=recipe, calibration_fraction=1.0)
    assert not ds.evaluation
    report = api.evaluate_on_dataset(ds, model, target=TARGET)
    (out,) = report.outputs
    assert out.task == "classification" and out.results
    assert all(r.value is None and "evaluation part is empty" in r.detail for r in out.results)
    assert report.target_met is False and report.samples == 0
    assert any("n/a" in n for n in report.notes) and any("nothing evaluated" in n for n in report.notes)
    json.loads(json.dumps(report.to_dict(), allow_nan=False))
