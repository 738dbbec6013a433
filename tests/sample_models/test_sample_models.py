"""The bundled sample models: reproducible, valid, and runnable where they should be."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from sample_models import build
from sample_models.catalog import ALL_SAMPLES, CATALOG, DECODERS, DEFAULT_SAMPLE, SAMPLE_DIR, SampleModel, path_of

BY_NAME = {m.name: m for m in ALL_SAMPLES}
ORT_MODELS = [m for m in CATALOG if m.runs_on_ort]

MAX_FILE_BYTES = 512 * 1024
MAX_TOTAL_BYTES = 4096 * 1024


@pytest.fixture(scope="module")
def fresh_build(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("samples")
    build.build_all(out)
    return out


def _feeds(session: ort.InferenceSession, dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for inp in session.get_inputs():
        shape = [dims[d] if isinstance(d, str) else d for d in inp.shape]
        if inp.type == "tensor(int64)":
            if inp.name == "attention_mask":
                feeds[inp.name] = np.ones(shape, dtype=np.int64)
            else:
                feeds[inp.name] = rng.integers(0, 1000, size=shape, dtype=np.int64)
        elif inp.type == "tensor(float)":
            if inp.name == "grid":  # normalized coordinates, slightly past the border
                feeds[inp.name] = rng.uniform(-1.1, 1.1, size=shape).astype(np.float32)
            else:
                feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
        else:  # pragma: no cover - no sample uses other input types
            raise AssertionError(f"unexpected input type {inp.type} for {inp.name}")
    return feeds


def _run(model: SampleModel, dims: dict[str, int]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
    outputs = session.run(None, _feeds(session, dims))
    for info, value in zip(session.get_outputs(), outputs):
        assert np.isfinite(value).all(), f"{model.name}:{info.name} has non-finite values"
        assert np.ptp(value) > 1e-3, f"{model.name}:{info.name} is (nearly) constant"
    return outputs


# ---------------------------------------------------------------- catalog


def test_catalog_matches_builders_and_files() -> None:
    assert [m.name for m in ALL_SAMPLES] == list(build.BUILDERS)
    assert len({m.name for m in ALL_SAMPLES}) == len(ALL_SAMPLES) == 21 and len(CATALOG) == 15
    assert DEFAULT_SAMPLE in BY_NAME
    # decoders are labelled as such and as random weights but the one trained; no other sample is a decoder
    assert all({"decoder", "random-weights"} <= set(m.tags) for m in DECODERS if m.name != "char_gpt2_decoder")
    assert {"decoder", "trained"} <= set(BY_NAME["char_gpt2_decoder"].tags)
    assert not any("decoder" in m.tags for m in CATALOG)
    for m in ALL_SAMPLES:
        assert path_of(m.name) == SAMPLE_DIR / m.filename
        assert m.filename == f"{m.name}.onnx"
        assert m.purpose and "\n" not in m.purpose
        for f in m.files:
            assert (SAMPLE_DIR / f).is_file(), f"{f} is not committed; run python -m sample_models.build"
    assert BY_NAME["external_data"].extra_files == ("external_data.onnx.data",)
    assert [m.name for m in CATALOG if not m.runs_on_ort] == ["mmdeploy_grid_sampler"]
    with pytest.raises(KeyError):
        path_of("no_such_model")


def test_sizes() -> None:
    sizes = {f: (SAMPLE_DIR / f).stat().st_size for m in ALL_SAMPLES for f in m.files}
    assert all(s < MAX_FILE_BYTES for s in sizes.values()), sizes
    assert sum(sizes.values()) < MAX_TOTAL_BYTES, sizes


# ----------------------------------------------------------- (a) reproducible


@pytest.mark.parametrize("model", ALL_SAMPLES, ids=lambda m: m.name)
def test_committed_files_match_build(model: SampleModel, fresh_build: pathlib.Path) -> None:
    for f in model.files:
        assert (SAMPLE_DIR / f).read_bytes() == (fresh_build / f).read_bytes(), (
            f"{f} differs from build.py output; run `python -m sample_models.build --force`"
        )


def test_build_is_deterministic_and_check_passes(tmp_path: pathlib.Path) -> None:
    # two in-memory builds serialize identically
    for name, fn in build.BUILDERS.items():
        assert fn().SerializeToString() == fn().SerializeToString(), name
    # rebuilding the external-data model over an existing .data file must not append to it
    build.build_all(tmp_path, ["external_data"])
    first = (tmp_path / "external_data.onnx.data").read_bytes()
    build.build_all(tmp_path, ["external_data"])
    assert (tmp_path / "external_data.onnx.data").read_bytes() == first
    assert build.main(["--check"]) == 0


# ----------------------------------------------------------------- (b) valid


@pytest.mark.parametrize("model", ALL_SAMPLES, ids=lambda m: m.name)
def test_full_checker(model: SampleModel) -> None:
    onnx.checker.check_model(str(model.path), full_check=True)
    proto = onnx.load(str(model.path), load_external_data=False)
    assert proto.producer_name == "onnx-studio-samples"
    assert proto.doc_string
    assert proto.ir_version <= 10
    default_opset = {o.domain: o.version for o in proto.opset_import}[""]
    assert default_opset == model.opset
    # exporter-like scoped node names, all unique
    names = [n.name for n in proto.graph.node]
    assert all(n.startswith("/") or n == "optimum::if" for n in names)   # the If name optimum's merge gives
    assert len(set(names)) == len(names)


def test_model_contents() -> None:
    def ops(name: str) -> list[str]:
        return [n.op_type for n in onnx.load(str(path_of(name)), load_external_data=False).graph.node]

    cnn = onnx.load(str(path_of("cnn_unfused")))
    cnn_ops = [n.op_type for n in cnn.graph.node]
    assert cnn_ops.count("BatchNormalization") >= 4 and cnn_ops.count("Conv") >= 4
    for op in ("Identity", "Dropout", "Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Gemm", "Add"):
        assert op in cnn_ops, op
    assert "/layer1/layer1.0/conv1/Conv" in {n.name for n in cnn.graph.node}
    assert sorted(len(n.input) for n in cnn.graph.node if n.op_type == "Dropout") == [1, 2]

    mb = onnx.load(str(path_of("mobilenet_like")))
    depthwise = [n for n in mb.graph.node if n.op_type == "Conv" and onnx.helper.get_node_attr_value(n, "group") > 1]
    assert depthwise
    assert {"Clip", "HardSwish", "Add", "GlobalAveragePool", "Flatten", "Gemm"} <= set(ops("mobilenet_like"))

    tb = set(ops("transformer_block"))
    assert {"Gather", "MatMul", "Softmax", "Erf", "ReduceMean", "Pow", "Sqrt", "Transpose", "Reshape"} <= tb
    assert "Range" not in tb

    mm = onnx.load(str(path_of("mmdeploy_grid_sampler"))).graph.node
    (gs,) = [n for n in mm if n.op_type == "grid_sampler"]
    assert gs.domain == "mmdeploy"
    assert {a.name: onnx.helper.get_attribute_value(a) for a in gs.attribute} == {
        "interpolation_mode": 0,
        "padding_mode": 0,
        "align_corners": 0,
    }
    (ms,) = [n for n in onnx.load(str(path_of("com_microsoft_gridsample"))).graph.node if n.op_type == "GridSample"]
    assert ms.domain == "com.microsoft"
    (g5,) = [n for n in onnx.load(str(path_of("gridsample_5d"))).graph.node if n.op_type == "GridSample"]
    assert onnx.helper.get_node_attr_value(g5, "mode") == b"linear"

    il = onnx.load(str(path_of("if_loop"))).graph
    loop = next(n for n in il.node if n.op_type == "Loop")
    body = onnx.helper.get_node_attr_value(loop, "body")
    assert any(n.op_type == "If" for n in body.node), "nested If inside the Loop body"

    ext = onnx.load(str(path_of("external_data")), load_external_data=False)
    assert any(onnx.external_data_helper.uses_external_data(t) for t in ext.graph.initializer)

    cw = onnx.load(str(path_of("constant_weights"))).graph
    assert not cw.initializer and sum(n.op_type == "Constant" for n in cw.node) >= 4


# ------------------------------------------------------------------ (c) run


@pytest.mark.parametrize("model", ORT_MODELS, ids=lambda m: m.name)
def test_runs_on_onnxruntime(model: SampleModel) -> None:
    _run(model, {"batch": 2, "sequence": 7, "height": 96, "width": 128})


def test_transformer_dynamic_shapes() -> None:
    model = BY_NAME["transformer_block"]
    for batch, seq in ((1, 5), (3, 19)):
        (out,) = _run(model, {"batch": batch, "sequence": seq})
        assert out.shape == (batch, seq, 64)


def test_if_loop_takes_both_branches() -> None:
    session = ort.InferenceSession(str(path_of("if_loop")), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    pos_out, pos_trace = session.run(None, {"input": np.abs(x)})
    neg_out, _ = session.run(None, {"input": -np.abs(x)})
    assert pos_trace.shape == (3, 2, 16)
    np.testing.assert_array_equal(pos_out, pos_trace[-1])
    assert not np.allclose(pos_out, neg_out)


def test_gridsample_variants_agree() -> None:
    ref = ort.InferenceSession(str(path_of("gridsample_4d")), providers=["CPUExecutionProvider"])
    ms = ort.InferenceSession(str(path_of("com_microsoft_gridsample")), providers=["CPUExecutionProvider"])
    feeds = _feeds(ref, {})
    np.testing.assert_allclose(ref.run(None, feeds)[0], ms.run(None, feeds)[0], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------- (d) unrunnable


def test_mmdeploy_fails_in_onnxruntime() -> None:
    with pytest.raises(Exception, match="grid_sampler"):
        ort.InferenceSession(str(path_of("mmdeploy_grid_sampler")), providers=["CPUExecutionProvider"])


def test_detector_is_ultralytics_shaped() -> None:
    det = onnx.load(str(path_of("yolo_detector")))
    names = {n.name for n in det.graph.node}
    ops = [n.op_type for n in det.graph.node]
    assert 200 <= len(ops) <= 400
    assert {"/model.2/m.0/cv1/conv/Conv", "/model.9/m/MaxPool_2", "/model.22/dfl/Softmax",
            "/model.22/cv3.2/cv3.2.2/Conv"} <= names
    assert ops.count("Resize") == 2 and ops.count("Add") >= 6 and "Split" in ops
    assert {p.key: p.value for p in det.metadata_props}["imgsz"] == "[320, 320]"
    dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in det.graph.value_info]
    assert ["batch", 4, "floor(height/2 - 1/2) + 1", "floor(width/2 - 1/2) + 1"] in dims
