"""Image folders become feeds: resize, layout (auto/NCHW/NHWC), normalization,
uint8 and grayscale inputs; bad folders and files give one-line errors.
PNGs are generated here with Pillow."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from studio.core.errors import StudioError
from studio.core.feeds import (
    ImagePreprocess,
    InputSpec,
    image_feeds,
    input_specs,
    load_npz,
    make_feeds,
    save_npz,
)
from studio.core.input_files import save_image_uploads, save_npz_upload
from tests.conftest import SAMPLES, assert_user_message, parse_model


def _png(path, rgb, size=(40, 30)):
    Image.new("RGB", size, rgb).save(path)
    return path


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "imgs"
    d.mkdir()
    _png(d / "a.png", (255, 0, 0))
    _png(d / "b.PNG", (0, 128, 255))
    (d / "notes.txt").write_text("not an image")
    return d


def test_nchw_resize_and_imagenet_normalization(folder):
    spec = InputSpec("x", "float32", (1, 3, 8, 6))
    feeds = image_feeds(folder, spec)
    assert len(feeds) == 2 and feeds[0]["x"].shape == (1, 3, 8, 6) and feeds[0]["x"].dtype == np.float32
    red = feeds[0]["x"][0, :, 0, 0]          # files sorted by name: a.png (red) first
    expected = (np.array([1.0, 0.0, 0.0]) - [0.485, 0.456, 0.406]) / np.array([0.229, 0.224, 0.225])
    assert np.allclose(red, expected, atol=1e-5)


def test_nhwc_is_detected_and_bgr_swaps_channels(folder):
    spec = InputSpec("x", "float32", (1, 5, 7, 3))
    plain = image_feeds(folder, spec, ImagePreprocess(mean=(0, 0, 0), std=(1, 1, 1)))[0]["x"]
    assert plain.shape == (1, 5, 7, 3) and np.allclose(plain[0, 0, 0], [1, 0, 0])
    bgr = image_feeds(folder, spec, ImagePreprocess(mean=(0, 0, 0), std=(1, 1, 1), bgr=True))[0]["x"]
    assert np.allclose(bgr[0, 0, 0], [0, 0, 1])


def test_uint8_input_gets_raw_pixels_and_grayscale_one_channel(folder):
    raw = image_feeds(folder, InputSpec("x", "uint8", (1, 4, 4, 3)))[1]["x"]
    assert raw.dtype == np.uint8 and raw[0, 0, 0].tolist() == [0, 128, 255]
    gray = image_feeds(folder, InputSpec("x", "float32", (1, 1, 4, 4)))[0]["x"]
    assert gray.shape == (1, 1, 4, 4)


def test_dynamic_size_needs_image_size(folder):
    spec = InputSpec("x", "float32", ("N", 3, "H", "W"))
    with pytest.raises(StudioError) as e:
        image_feeds(folder, spec)
    assert_user_message(str(e.value), "dynamic", "image size")
    assert image_feeds(folder, spec, ImagePreprocess(size=(9, 11)))[0]["x"].shape == (1, 3, 9, 11)


def test_bad_folders_and_files(tmp_path, folder):
    spec = InputSpec("x", "float32", (1, 3, 8, 8))
    empty = tmp_path / "empty"
    empty.mkdir()
    for bad, needle in ((empty, "no images"), (tmp_path / "missing", "not a folder")):
        with pytest.raises(StudioError) as e:
            image_feeds(bad, spec)
        assert_user_message(str(e.value), needle)
    (folder / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(StudioError) as e:
        image_feeds(folder, spec)
    assert_user_message(str(e.value), "broken.png", "cannot be read")
    with pytest.raises(StudioError, match="channels"):
        image_feeds(folder, InputSpec("x", "float32", (1, 5, 8, 8)), ImagePreprocess(layout="NCHW"))


def test_make_feeds_from_images_and_npz_round_trip(folder, tmp_path):
    model = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1,3,8,8] img, int64[1] k) => '
                        '(float[1,3,8,8] y) { y = Identity(img) }')
    fs = make_feeds(model, images=folder)
    assert len(fs) == 2 and set(fs.sets[0]) == {"img", "k"} and "image" in fs.source
    path = save_npz(fs.sets, tmp_path / "x.npz")
    back = load_npz(path, input_specs(model))
    assert len(back) == 2 and np.array_equal(back[1]["img"], fs.sets[1]["img"])
    rnd = make_feeds(model, count=3, seed=5)
    assert len(rnd) == 3 and "seed 5" in rnd.source
    with pytest.raises(StudioError, match="either"):
        make_feeds(model, inputs=path, images=folder)


def test_model_without_image_input_is_refused(folder):
    model = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[4] x) => (float[4] y) '
                        '{ y = Identity(x) }')
    with pytest.raises(StudioError) as e:
        make_feeds(model, images=folder)
    assert_user_message(str(e.value), "no 4-D image input")


def test_uploads_use_generated_names(tmp_path):
    png = tmp_path / "p.png"
    _png(png, (1, 2, 3))
    out = save_image_uploads([("../../etc/evil.png", png.read_bytes())], tmp_path / "job")
    assert [p.name for p in out.iterdir()] == ["img0000.png"] and out.parent == tmp_path / "job"
    with pytest.raises(StudioError):
        save_image_uploads([("x.exe", b"MZ")], tmp_path / "job2")
    with pytest.raises(StudioError, match="not an .npz"):
        save_npz_upload(b"<html>", tmp_path / "job3")


def test_cnn_sample_runs_on_image_feeds(folder):
    import onnxruntime as ort

    from studio.core.model import load

    h = load(SAMPLES / "cnn_unfused.onnx")
    fs = make_feeds(h.proto, images=folder)
    sess = ort.InferenceSession(str(h.path), providers=["CPUExecutionProvider"])
    out = sess.run(None, fs.sets[0])
    assert np.isfinite(out[0]).all()
