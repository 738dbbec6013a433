"""The bundle of a real `export all`: folder layout, manifest (sha256s, versions,
opsets, shapes, precisions, verification, benchmarks), reports, zip."""

from __future__ import annotations

import hashlib
import json
import zipfile

from tests.conftest import SAMPLES, sha256_file


def test_layout_and_verdict(cnn_export):
    r = cnn_export
    assert r.ok and r.exit_code == 0 and not r.failures
    assert r.bundle.name.startswith("cnn_unfused-") and r.bundle.name.endswith(r.manifest["source"]["sha256"][:8])
    for sub in ("onnxruntime", "openvino", "tensorrt", "triton/model_repository"):
        assert (r.bundle / sub).is_dir()
    for f in ("manifest.json", "report.md", "report.html", "graph.html"):
        assert (r.bundle / f).is_file()
    status = {t.target: t.status for t in r.targets}
    assert status == {"onnxruntime": "passed", "openvino": "passed", "tensorrt": "not verified", "triton": "passed"}
    # Nothing half-written is left in the output folder.
    assert sorted(p.name for p in r.bundle.parent.iterdir()) == sorted([r.bundle.name, r.zip_path.name])


def test_manifest_records_what_was_made_and_how(cnn_export):
    r = cnn_export
    m = json.loads((r.bundle / "manifest.json").read_text())
    assert m["format"] == "onnx-studio-export/1" and m["ok"] is True
    assert m["source"]["sha256"] == sha256_file(SAMPLES / "cnn_unfused.onnx")
    assert m["source"]["opsets"] == {"ai.onnx": 17}
    assert m["source"]["inputs"][0]["shape"] == ["batch", 3, 32, 32]
    assert m["verification"]["input_shapes"] == {"input": [1, 3, 32, 32]}
    assert "optimizations off" in m["verification"]["reference"]
    for tool in ("onnx", "onnxruntime", "openvino", "tritonclient", "onnx-studio"):
        assert m["tools"][tool], tool
    assert m["tools"]["tensorrt_status"].startswith("not available")
    # every engine of the table records its version (ncnn was missing), read from package metadata
    from importlib import metadata

    for tool, dist in {"onnxruntime": "onnxruntime", "openvino": "openvino", "mnn": "MNN",
                       "ai-edge-litert": "ai-edge-litert", "ncnn": "ncnn", "pnnx": "pnnx"}.items():
        assert m["tools"][tool] == metadata.version(dist), tool
    # Every file of the bundle (but the manifest) is listed with its real sha256.
    listed = {f["path"]: f for f in m["files"]}
    on_disk = {p.relative_to(r.bundle).as_posix() for p in r.bundle.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(listed) == on_disk
    for rel, f in listed.items():
        assert f["sha256"] == sha256_file(r.bundle / rel), rel
    # Artifacts carry precision and a verification record; sha256s agree with the files.
    arts = {a["path"]: a for t in m["targets"].values() for a in t["artifacts"]}
    ort = arts["onnxruntime/model.onnx"]
    assert ort["precision"] == "fp32" and ort["portable"] is True
    assert ort["verification"]["status"] == "passed" and ort["verification"]["checker"] == "passed"
    assert ort["verification"]["comparison"]["ok"] is True
    assert arts["openvino/model.xml"]["companions"] == ["openvino/model.bin"]
    assert arts["tensorrt/build_engine.py"]["verification"]["status"] == "not verified"
    assert "TensorRT is not installed" in arts["tensorrt/build_engine.py"]["verification"]["message"]
    # the one verification vocabulary: why it was not compared is its reason; a passed one has none
    assert "TensorRT is not installed" in arts["tensorrt/build_engine.py"]["verification"]["reason"]
    assert ort["verification"]["reason"] == "" and ort["verification"]["numeric_status"] == "passed"
    for path, a in arts.items():
        assert a["sha256"] == listed[path]["sha256"]
    # Benchmarks: session creation and latency for the original and the artifacts, with the note.
    b = m["benchmarks"]
    assert "median" in b["note"]
    assert {"fast-start", "fast-inference", "ort-format", "original (ORT defaults)"} <= set(b["onnxruntime"])
    assert b["onnxruntime"]["fast-start"]["session_ms"] > 0 and b["onnxruntime"]["fast-start"]["latency_ms_median"] > 0
    assert b["openvino"]["model.xml"]["compile_ms"] > 0
    # No absolute paths of this machine in the manifest.
    assert str(r.bundle.parent) not in json.dumps(m)


def test_reports(cnn_export):
    r = cnn_export
    md = (r.bundle / "report.md").read_text()
    assert md.startswith("# Export report: cnn") and "✅" in md and "## Benchmarks" in md
    assert "⚠️ not verified" in md and "TensorRT is not installed" in md
    html = (r.bundle / "report.html").read_text()
    # Self-contained: plotly.js inline (no CDN), charts drawn, graph view embedded from the bundle.
    assert "Plotly.newPlot" in html and "<script src=" not in html.replace(" ", "")
    assert html.count("plotly.js v") == 1           # the library is inlined once for both charts
    assert "<iframe src='graph.html'" in html
    graph = (r.bundle / "graph.html").read_text()
    assert "__graph" in graph and "echarts" not in graph.lower()        # the box viewer `onnx-studio graph` writes
    assert "http://" not in graph.split("<body", 1)[-1][:2000]


def test_zip_holds_the_same_files(cnn_export):
    r = cnn_export
    with zipfile.ZipFile(r.zip_path) as z:
        names = {n for n in z.namelist() if not n.endswith("/")}
        on_disk = {f"{r.bundle.name}/{p.relative_to(r.bundle).as_posix()}" for p in r.bundle.rglob("*") if p.is_file()}
        assert names == on_disk
        manifest = json.loads(z.read(f"{r.bundle.name}/manifest.json"))
        assert manifest["files"]
        for f in manifest["files"]:
            assert hashlib.sha256(z.read(f"{r.bundle.name}/{f['path']}")).hexdigest() == f["sha256"]
    # Readable like any file the user writes (temp files were private while written).
    assert (r.bundle / "manifest.json").stat().st_mode & 0o044
    assert (r.bundle / "tensorrt" / "build_engine.py").stat().st_mode & 0o100


def test_result_to_dict_is_json(cnn_export):
    d = cnn_export.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["ok"] and [t["target"] for t in d["targets"]] == ["onnxruntime", "openvino", "tensorrt", "triton"]
