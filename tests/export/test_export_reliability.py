"""RELIABILITY R25 (export traps), R26 (> 2 GiB, ORT_ENABLE_ALL input), R27 (side files):
everything lands inside the output folder or is rejected, victims unchanged."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio import api
from studio.core.errors import PathError, UnsafeModelError
from studio.export.files import write_model_copy
from tests.conftest import assert_user_message, sha256_file
from tests.export.conftest import conv_model


def _tree(root: Path) -> dict[str, str]:
    """Every file under root (links as links) -> sha256 or link target."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = sha256_file(p)
    return out


# ---------------------------------------------------------------------------- R25

@pytest.mark.parametrize("name", ["../x.onnx", "/etc/cron.d/x", "a\x00b", "..", "~/.ssh/id_rsa"])
def test_user_names_stay_inside_the_output_folder(tmp_path, name):
    model = conv_model(tmp_path / "m" / "convnet.onnx")
    before = _tree(tmp_path)
    out = tmp_path / "out"
    r = api.export(api.load(model), "ort", out, name=name, ort_format=False)
    assert r.bundle.parent == out.resolve() and r.zip_path.parent == out.resolve()
    new = set(_tree(tmp_path)) - set(before)
    assert new and all(p.startswith("out/") for p in new), sorted(new)


def test_output_folder_with_nul_or_a_file_is_rejected(tmp_path):
    model = api.load(conv_model(tmp_path / "m" / "convnet.onnx"))
    with pytest.raises(PathError) as info:
        api.export(model, "ort", str(tmp_path / "o\x00ut"))
    assert_user_message(str(info.value), "NUL")
    (tmp_path / "file").write_text("x")
    with pytest.raises(PathError, match="not a folder"):
        api.export(model, "ort", tmp_path / "file")


def _cve_model(folder: Path) -> Path:
    """CVE-2025-51480 shape: an initializer with raw bytes *and* location '../victim'."""
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="../victim")
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [t])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    folder.mkdir(parents=True)
    (folder / "cve.onnx").write_bytes(m.SerializeToString())   # written raw: onnx's saver refuses it now
    return folder / "cve.onnx"


def test_cve_location_with_raw_data_is_rejected_before_export(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    path = _cve_model(tmp_path / "m")
    with pytest.raises(UnsafeModelError) as info:
        api.load(path)
    assert_user_message(str(info.value))
    assert victim.read_bytes() == b"precious"


def test_model_writer_never_follows_model_locations(tmp_path):
    """The bundle's own writer, given a model whose inline tensor still carries '../victim'
    entries: bytes go to the copy, nothing to the victim, and the stray entries are dropped."""
    victim = tmp_path / "out" / "victim"
    victim.parent.mkdir()
    victim.write_bytes(b"precious")
    t = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    t.external_data.add(key="location", value="../victim")            # inline data, stray location
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [t])
    src = tmp_path / "src" / "m.onnx"
    src.parent.mkdir()
    src.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    written = write_model_copy(src, tmp_path / "out" / "b" / "model.onnx")
    assert written == (tmp_path / "out" / "b" / "model.onnx",)
    copy = onnx.load(written[0])
    assert not copy.graph.initializer[0].external_data
    np.testing.assert_array_equal(numpy_helper.to_array(copy.graph.initializer[0]), np.arange(4, dtype=np.float32))
    assert victim.read_bytes() == b"precious"


def test_planted_symlinks_are_never_followed(tmp_path):
    """Links inside an earlier bundle go with it (never followed); a link at the zip's or the bundle's
    own name is refused with a message (studio.core.outputs, R32), its target untouched."""
    model = conv_model(tmp_path / "m" / "convnet.onnx", channels=64)
    handle = api.load(model)
    out = tmp_path / "out"
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"precious")
    victim_dir = tmp_path / "victim_dir"
    victim_dir.mkdir()
    (victim_dir / "keep").write_bytes(b"keep")
    from studio.export.bundle import bundle_name

    name = bundle_name(handle.name, handle.sha256)
    # A previous bundle (its manifest says so) with a link at the weights file; a link as the zip.
    planted = out / name / "onnxruntime"
    planted.mkdir(parents=True)
    (out / name / "manifest.json").write_text('{"format": "onnx-studio-export/1"}')
    (planted / "model.onnx.data").symlink_to(victim)
    (out / f"{name}.zip").symlink_to(victim)
    from studio.core.errors import PathError
    from studio.export.exporter import export_model
    from studio.export.options import ExportOptions

    options = ExportOptions(targets=("ort", "triton"), ort_format=False, external_data=True)
    with pytest.raises(PathError, match="symbolic link"):
        export_model(handle, options, out)
    assert (out / f"{name}.zip").is_symlink() and victim.read_bytes() == b"precious"
    (out / f"{name}.zip").unlink()
    r = export_model(handle, options, out)
    assert r.ok, r.failures
    data = r.bundle / "onnxruntime" / "model.onnx.data"
    assert data.is_file() and not data.is_symlink()
    assert not r.zip_path.is_symlink() and r.zip_path.stat().st_size > 0
    assert victim.read_bytes() == b"precious"
    # The bundle folder itself planted as a link to another folder: refused, the folder untouched.
    import shutil

    shutil.rmtree(r.bundle)
    (out / name).symlink_to(victim_dir, target_is_directory=True)
    with pytest.raises(PathError, match="symbolic link"):
        api.export(handle, "ort", out, ort_format=False)
    assert (out / name).is_symlink() and _tree(victim_dir) == {"keep": sha256_file(victim_dir / "keep")}


def test_tensor_names_are_never_file_names(tmp_path):
    """Initializers named '../../x' stored as per-tensor external files: the bundle uses its own
    file names, nothing appears outside the output folder."""
    folder = tmp_path / "deep" / "m"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    inits = []
    for i, name in enumerate(["../../x", "../../y"]):
        arr = rng.standard_normal((64, 64)).astype(np.float32)
        (folder / f"w{i}.bin").write_bytes(arr.tobytes())
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[64, 64])
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", f"w{i}.bin"), ("offset", "0"), ("length", str(arr.nbytes))):
            t.external_data.add(key=k, value=v)
        inits.append(t)
    g = helper.make_graph([helper.make_node("MatMul", ["a", "../../x"], ["h"]),
                           helper.make_node("MatMul", ["h", "../../y"], ["z"])], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 64])], inits)
    path = folder / "m.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    before = _tree(tmp_path)
    src_hash = sha256_file(path)
    r = api.export(api.load(path), "all", tmp_path / "deep" / "out")
    assert r.target("onnxruntime").status == "passed" and r.target("openvino").status == "passed", r.failures
    new = set(_tree(tmp_path)) - set(before)
    assert all(p.startswith("deep/out/") for p in new), sorted(new)
    names = {Path(p).name for p in new}
    assert not ({"x", "y"} & names)
    assert sha256_file(path) == src_hash and (tmp_path / "deep" / "m" / "w0.bin").exists()


# ---------------------------------------------------------------------------- R26

def test_external_data_decision_for_models_over_2_gib(tmp_path):
    """The decision reads sizes from the files, never the bytes: a 2.1 GiB sparse weights file."""
    from studio.core.model import model_weight_bytes
    from studio.export.onnxruntime import external_decision

    folder = tmp_path / "big"
    folder.mkdir()
    n = (2**31 + 2**26) // 4
    with open(folder / "big.onnx.data", "wb") as fh:
        fh.truncate(n * 4)                                   # sparse: no disk used
    t = TensorProto(name="table", data_type=TensorProto.FLOAT, dims=[n])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "big.onnx.data"), ("offset", "0"), ("length", str(n * 4))):
        t.external_data.add(key=k, value=v)
    g = helper.make_graph([helper.make_node("Gather", ["table", "i"], ["y"])], "g",
                          [helper.make_tensor_value_info("i", TensorProto.INT64, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [t])
    (folder / "big.onnx").write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                                                        ir_version=8).SerializeToString())
    size = model_weight_bytes(folder / "big.onnx")
    assert size > 2**31
    external, ort_format, notes = external_decision(size, requested=False, source_external=True)
    assert external is True and ort_format is False
    assert any("2 GiB protobuf limit" in n and "model.onnx.data" in n for n in notes)
    assert any("cannot hold models over 2 GiB" in n for n in notes)


def test_large_model_path_with_a_lowered_limit(tmp_path, monkeypatch):
    """The > 2 GiB path end to end on a small model, with the limit lowered to 4 KiB (a real
    2 GiB export costs minutes and ~8 GB of disk here): weights external with the size note,
    no .ort, the Triton ONNX model in Triton's directory layout, everything verified."""
    import studio.core.save as core_save
    import studio.export.files as files
    import studio.export.onnxruntime as ort_target
    import studio.export.triton as triton_target

    for mod, attr in ((ort_target, "EXTERNAL_DATA_THRESHOLD"), (ort_target, "ORT_FORMAT_LIMIT"),
                      (files, "EXTERNAL_DATA_THRESHOLD"), (core_save, "EXTERNAL_DATA_THRESHOLD"),
                      (triton_target, "EXTERNAL_DATA_THRESHOLD")):     # each module's own name (module-level imports)
        monkeypatch.setattr(mod, attr, 4096)
    model = conv_model(tmp_path / "m" / "convnet.onnx", channels=64)
    r = api.export(api.load(model), ["ort", "triton"], tmp_path / "out")
    assert r.ok, r.failures
    t = r.target("onnxruntime")
    assert any("over the 2 GiB protobuf limit" in n for n in t.notes) and "model.ort" not in {
        Path(a.path).name for a in t.artifacts}
    assert (r.bundle / "onnxruntime" / "model.onnx.data").is_file()
    tri = r.bundle / "triton" / "model_repository" / "convnet_onnxruntime" / "1" / "model.onnx"
    assert tri.is_dir() and sorted(p.name for p in tri.iterdir()) == ["model.onnx", "model.onnx.data"]


def _ort_all_model(tmp_path: Path) -> Path:
    import onnxruntime as ort

    src = conv_model(tmp_path / "m" / "convnet.onnx", channels=16)
    out = tmp_path / "ortall" / "convnet_all.onnx"
    out.parent.mkdir()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(out)
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    assert any(n.domain == "com.microsoft.nchwc" for n in onnx.load(out).graph.node)
    return out


def test_ort_enable_all_model_is_labelled_and_refused_for_openvino(tmp_path):
    path = _ort_all_model(tmp_path)
    src_hash = sha256_file(path)
    r = api.export(api.load(path), "all", tmp_path / "out")
    assert r.exit_code == 1
    ov = r.target("openvino")
    assert ov.status == "error" and "refused for OpenVINO" in ov.message and "hardware-specific" in ov.message
    assert "ORT_ENABLE_ALL" in ov.message and "original" in ov.message
    assert_user_message(ov.message)
    assert r.target("tensorrt").status == "error" and "refused for TensorRT" in r.target("tensorrt").message
    ort_t = r.target("onnxruntime")
    assert any("hardware-specific input" in n for n in ort_t.notes)
    assert all(a.portable is False for a in ort_t.artifacts if a.kind in ("onnx", "ort"))
    assert r.manifest["deploy"]["hardware_specific"]
    assert not (r.bundle / "openvino" / "model.xml").exists()
    report = (r.bundle / "report.md").read_text()
    assert report.index("## Failures") < report.index("## Targets") and "refused for OpenVINO" in report
    assert sha256_file(path) == src_hash


# ---------------------------------------------------------------------------- R27

def test_side_files_stay_in_the_job_folders(tmp_path, monkeypatch):
    """ORT's optimized_model_filepath and every other engine file land in the bundle's target
    folders; the cwd, HOME and the sandbox's job folders keep nothing."""
    from studio.core.sandbox.pool import job_root as sandbox_job_root

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(home))
    model = conv_model(tmp_path / "m" / "convnet.onnx")
    before = _tree(tmp_path / "m")
    job_root = Path(sandbox_job_root())
    workers_before = set(job_root.iterdir())
    r = api.export(api.load(model), "all", tmp_path / "out", pool_key="r27")
    assert r.ok, r.failures
    # Engines' per-user files (ORT device id, OpenVINO telemetry id) went to the worker's folder, not HOME.
    assert _tree(cwd) == {} and _tree(home) == {} and _tree(tmp_path / "m") == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([r.bundle.name, r.zip_path.name])
    mine = set(job_root.iterdir()) - workers_before
    assert all({f.name for f in d.iterdir() if f.is_file()} <= {"worker.log"} for d in mine)   # no job leftovers
    api.release_session("r27")
    assert not any(d.exists() for d in mine)                  # and the worker's folder goes with it
