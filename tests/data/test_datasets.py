"""Datasets: import (images, audio, text, tensors, loader scripts), preprocessing recipes, feeds."""

from __future__ import annotations

import json
import uuid
import wave
import zipfile
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper
from PIL import Image

from studio.core.errors import StudioError
from studio.core.preprocess import PRESETS, Recipe, apply_recipe
from studio.core.preprocess_suggest import suggest_recipe
from studio.data.datasets import dataset_feeds, import_dataset, load_dataset
from tests.conftest import sha256_file
from tests.photos import photo_folder
from tests.requirements import require_module

skimage_data = require_module("skimage.data")


def _image_model(shape=(1, 3, 64, 64), dtype=TensorProto.FLOAT, metadata=()):
    g = helper.make_graph([helper.make_node("ReduceMean", ["x"], ["y"], keepdims=0, axes=[2, 3])], "g",
                          [helper.make_tensor_value_info("x", dtype, list(shape))],
                          [helper.make_tensor_value_info("y", dtype, [shape[0], shape[1]])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    for k, v in metadata:
        m.metadata_props.add(key=k, value=v)
    return m


def test_image_folder_with_labels_skips_unreadable_and_splits_deterministically(tmp_path):
    src = photo_folder(tmp_path / "photos")
    (src / "cat" / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    (src / "notes.txt").write_text("hello")
    before = {p: sha256_file(p) for p in src.rglob("*") if p.is_file()}
    ds = import_dataset(src, tmp_path / "data", model=_image_model(), calibration_fraction=0.5, seed=3)
    assert ds.kind == "image" and len(ds) == 9
    assert {s.label for s in ds.samples} == {"cat", "coffee", "rocket"} and ds.classes == ("cat", "coffee", "rocket")
    assert sorted(n for n, _ in ds.skipped) == ["cat/broken.jpg", "notes.txt"]
    assert len(ds.calibration) + len(ds.evaluation) == 9 and not set(ds.calibration) & set(ds.evaluation)
    again = import_dataset(src, tmp_path / "data2", model=_image_model(), calibration_fraction=0.5, seed=3)
    assert again.calibration == ds.calibration
    assert {p: sha256_file(p) for p in src.rglob("*") if p.is_file()} == before
    loaded = load_dataset(ds.folder)
    assert loaded.samples == ds.samples and loaded.recipe == ds.recipe
    feeds = dataset_feeds(loaded, _image_model(), part="all")
    assert len(feeds) == 9 and feeds[0]["x"].shape == (1, 3, 64, 64) and feeds[0]["x"].dtype == np.float32
    # ImageNet normalization by default for a plain 3-channel classifier
    assert ds.recipe.preset == "imagenet" and feeds[0]["x"].min() < -0.5


def test_yolo_models_get_letterbox_zero_to_one(tmp_path):
    model = _image_model((1, 3, "height", "width"), metadata=[("task", "detect"), ("imgsz", "[96, 128]"),
                                                              ("stride", "32")])
    recipe, reason = suggest_recipe(model)
    assert recipe.preset == "yolo" and "letterbox" in reason
    src = photo_folder(tmp_path / "photos", n_per_class=1)
    ds = import_dataset(src, tmp_path / "data", model=model)
    (x,) = [f["x"] for f in dataset_feeds(ds, model, part="all")[:1]]
    assert x.shape == (1, 3, 96, 128)
    assert 0.0 <= x.min() and x.max() <= 1.0
    assert np.isclose(x[0, :, 0, 0], 114 / 255).all() or np.isclose(x[0, :, 0, :], 114 / 255).any()


def test_recipe_modes_produce_the_requested_size():
    img = Image.fromarray(skimage_data.astronaut()[:300, :200])
    for mode in ("stretch", "letterbox", "center-crop"):
        arr = apply_recipe(img, Recipe(mode), (64, 48), "NHWC", "float32")
        assert arr.shape == (1, 64, 48, 3), mode
    strip = apply_recipe(img, PRESETS["text-strip"], (48, -1), "NCHW", "float32")
    assert strip.shape[2] == 48 and -1.0 <= strip.min() and strip.max() <= 1.0
    with pytest.raises(StudioError, match="resize must be"):
        Recipe("zoom")


def test_sample_the_model_cannot_take_names_input_expected_and_got(tmp_path):
    src = tmp_path / "t"
    src.mkdir()
    np.save(src / "a.npy", np.zeros((1, 3, 32, 32), np.float32))
    ds = import_dataset(src, tmp_path / "data")
    with pytest.raises(StudioError) as info:
        dataset_feeds(ds, _image_model(), part="all")
    msg = str(info.value)
    assert "input 'x'" in msg and "[1, 3, 64, 64]" in msg and "[1, 3, 32, 32]" in msg and "\n" not in msg


def test_hostile_zip_is_refused_before_anything_is_unpacked(tmp_path):
    z = tmp_path / "evil.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("ok.png", b"x")
        zf.writestr("../../escape.png", b"x")
    with pytest.raises(StudioError, match="unsafe path"):
        import_dataset(z, tmp_path / "data")
    assert not (tmp_path / "escape.png").exists()
    assert [p.name for p in (tmp_path / "data").iterdir()] == []


def test_wav_audio(tmp_path):
    src = tmp_path / "audio"
    src.mkdir()
    t = np.arange(1600) / 16000
    with wave.open(str(src / "tone.wav"), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes((np.sin(2 * np.pi * 440 * t) * 20000).astype(np.int16).tobytes())
    (src / "bad.wav").write_bytes(b"RIFF....garbage")
    ds = import_dataset(src, tmp_path / "data", options={"length": 2000})
    assert ds.kind == "audio" and len(ds) == 1 and ds.skipped[0][0] == "bad.wav"
    g = helper.make_graph([helper.make_node("Abs", ["audio"], ["y"])], "g",
                          [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", "samples"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "samples"])])
    (feeds,) = dataset_feeds(ds, helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), part="all")
    assert feeds["audio"].shape == (1, 2000) and abs(feeds["audio"]).max() == pytest.approx(20000 / 32768, 1e-3)


def _text_model():
    g = helper.make_graph([helper.make_node("Cast", ["input_ids"], ["y"], to=TensorProto.FLOAT)], "g",
                          [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
                           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_jsonl_token_ids_and_raw_text_with_a_tokenizer(tmp_path):
    src = tmp_path / "text"
    src.mkdir()
    (src / "ids.jsonl").write_text(json.dumps({"input_ids": [[5, 6, 7]], "attention_mask": [[1, 1, 1]],
                                               "label": 1}) + "\nnot json\n")
    ds = import_dataset(src, tmp_path / "data")
    assert ds.kind == "text" and len(ds) == 1 and ds.skipped == (("ids.jsonl:2", "not valid JSON"),)
    (f,) = dataset_feeds(ds, _text_model(), part="all")
    assert f["input_ids"].tolist() == [[5, 6, 7]]

    tokenizers = require_module("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "lines.txt").write_text("hello world\nworld hello hello\n")
    ds2 = import_dataset(raw, tmp_path / "data", tokenizer=tmp_path / "tokenizer.json", options={"seq_len": 4})
    feeds = dataset_feeds(ds2, _text_model(), part="all")
    assert feeds[0]["input_ids"].tolist() == [[1, 2, 0, 0]] and feeds[0]["attention_mask"].tolist() == [[1, 1, 0, 0]]


def test_loader_script_yields_samples_once(tmp_path):
    script = tmp_path / "loader.py"
    script.write_text("import numpy as np\n"
                      "def load_data():\n"
                      "    for i in range(3):\n"
                      "        yield {'x': np.full((1, 3, 64, 64), i, np.float32)}\n")
    ds = import_dataset(script, tmp_path / "data", kind="script", calibration_fraction=0)
    assert ds.kind == "script" and len(ds) == 3
    feeds = dataset_feeds(ds, _image_model(), part="all")
    assert [float(f["x"].mean()) for f in feeds] == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("body, needle", [
    ("def load_data():\n    raise ValueError('no data here')\n", "load_data() raised ValueError: no data here"),
    ("def load_data():\n    while True:\n        pass\n", "did not finish within"),
    ("def load_data():\n    return 5\n", "must return or yield"),
    ("x = = 1\n", "syntax error"),
    ("def load_data():\n    open('ESCAPE', 'w').write('x')\n    yield {}\n", "load_data() raised"),
])
def test_broken_loader_scripts_give_one_line_errors(tmp_path, body, needle, monkeypatch):
    if "while True" in body:        # it waits out the whole limit: any limit ends it with the same words
        monkeypatch.setenv("ONNX_STUDIO_TIMEOUT_S", "2")
    escape = Path(f"/tmp/studio-loader-escape-{uuid.uuid4().hex}")     # this run's own name: never a stale file
    script = tmp_path / "loader.py"
    script.write_text(body.replace("ESCAPE", str(escape)))
    with pytest.raises(StudioError) as info:
        import_dataset(script, tmp_path / "data", kind="script")
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert not escape.exists()
    assert [p.name for p in (tmp_path / "data").iterdir()] == []


@pytest.fixture(autouse=True)
def _short_timeout(monkeypatch):
    monkeypatch.setenv("ONNX_STUDIO_TIMEOUT_S", "8")
