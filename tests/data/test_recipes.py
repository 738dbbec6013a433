"""Preprocessing recipes from the CLI (every field as a flag, or --recipe FILE.json), their
one-line errors, and the suggestion's reasons (R50). The input tensors are checked against
a hand computation (numpy: BGR swap, minus mean, NHWC), the predictions against plain ORT."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from sample_models.catalog import SAMPLE_DIR, get, path_of
from sample_models.photos import PHOTO_DIR
from studio import api
from studio.cli import main

CAFFE = str(path_of("caffe_classifier"))
CAFFE_MEAN = np.array([103.939, 116.779, 123.68], np.float32)
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
CAFFE_FLAGS = ["--resize", "stretch", "--scale", "1", "--mean", "103.939,116.779,123.68", "--std", "1,1,1",
               "--color", "BGR", "--layout", "NHWC", "--dtype", "float32"]


def _crops(root, side=64):
    """The bundled photos cropped to the model's 64x64, so no resizing happens before the hand computation."""
    root.mkdir()
    out = []
    for p in sorted(PHOTO_DIR.rglob("*.png"))[::2]:
        target = root / f"{p.parent.name}-{p.stem}.png"
        Image.open(p).convert("RGB").crop((10, 16, 10 + side, 16 + side)).save(target)
        out.append(target)
    return out


def _pixels(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.float32)


def _caffe_by_hand(path) -> np.ndarray:
    return (_pixels(path)[..., ::-1] - CAFFE_MEAN)[None]                   # BGR, minus mean, NHWC


def _imagenet_by_hand(path) -> np.ndarray:
    return ((_pixels(path) * np.float32(1 / 255) - IMAGENET_MEAN) / IMAGENET_STD)[None]


def _feeds(project, name):
    ds = api.dataset(api.open_project(project), name)
    return ds, [f["data"] for f in api.preview_dataset(ds, api.load(CAFFE), count=len(ds))]


def _by_file(ds, crops):
    names = {p.name: p for p in crops}
    return [names[s.file.split("/")[-1].split("-", 1)[1]] for s in ds.samples]


def test_every_field_as_a_flag_and_as_a_recipe_file_give_the_tensor_computed_by_hand(tmp_path, capsys):
    crops = _crops(tmp_path / "crops")
    assert main(["data", "add", str(tmp_path / "crops"), "--project", "r1", "--name", "flags", "--model", CAFFE,
                 *CAFFE_FLAGS]) == 0
    assert "set on the command line: --resize stretch" in capsys.readouterr().out
    ds, got = _feeds("r1", "flags")
    assert ds.recipe.color == "BGR" and ds.recipe.layout == "NHWC" and ds.recipe.scale == 1.0
    for x, path in zip(got, _by_file(ds, crops), strict=True):
        np.testing.assert_array_equal(x, _caffe_by_hand(path))
    assert len(got) == len(crops) == 6

    recipe = tmp_path / "caffe.json"
    recipe.write_text(json.dumps({"resize": "stretch", "scale": 1, "mean": [103.939, 116.779, 123.68],
                                  "std": [1, 1, 1], "color": "BGR", "layout": "NHWC", "dtype": "float32"}))
    assert main(["data", "add", str(tmp_path / "crops"), "--project", "r1", "--name", "file", "--model", CAFFE,
                 "--recipe", str(recipe)]) == 0
    ds2, got2 = _feeds("r1", "file")
    assert ds2.recipe == ds.recipe
    for x, path in zip(got2, _by_file(ds2, crops), strict=True):
        np.testing.assert_array_equal(x, _caffe_by_hand(path))

    # data recipe changes and saves it; a flag on data show previews another one without saving
    assert main(["data", "recipe", "file", "--project", "r1", "--recipe", "imagenet", "--resize", "stretch"]) == 0
    ds3, got3 = _feeds("r1", "file")
    assert ds3.recipe.color == "RGB" and "--recipe imagenet --resize stretch" in ds3.recipe_reason
    for x, path in zip(got3, _by_file(ds3, crops), strict=True):
        np.testing.assert_allclose(x, _imagenet_by_hand(path), rtol=1e-6, atol=1e-6)
    capsys.readouterr()
    assert main(["data", "show", "file", "--project", "r1", "--model", CAFFE, "--json", "--recipe", str(recipe)]) == 0
    preview = json.loads(capsys.readouterr().out)["preview"]
    first = _caffe_by_hand(_by_file(ds3, crops)[0])[0]
    ranges = {c["channel"]: (c["min"], c["max"]) for c in preview[0]["channels"]}
    assert list(ranges) == ["B", "G", "R"]
    for i, ch in enumerate("BGR"):
        assert ranges[ch] == pytest.approx((float(first[..., i].min()), float(first[..., i].max())), abs=1e-4)
    assert api.dataset(api.open_project("r1"), "file").recipe == ds3.recipe   # show --recipe saved nothing


def test_the_recipe_file_of_the_caffe_sample_gets_its_predictions_and_imagenet_does_not(tmp_path):
    """Plain ORT on hand-made inputs (PIL centre crop 96 -> 73 -> 64, BGR, minus mean) against the
    studio's dataset feeds: the same predictions, and a wrong recipe changes them."""
    assert get("caffe_classifier").recipe_file == "caffe_classifier.recipe.json"
    recipe = api.preprocessing_recipe(file=SAMPLE_DIR / "caffe_classifier.recipe.json")
    assert recipe == api.suggest_preprocessing(api.load(CAFFE))[0]
    ds = api.add_dataset(api.open_project("r2", create=True), PHOTO_DIR, name="photos", recipe=recipe)
    session = ort.InferenceSession(CAFFE, providers=["CPUExecutionProvider"])
    feeds = api.preview_dataset(ds, api.load(CAFFE), count=len(ds))
    by_hand, studio = [], []
    for ref, feed in zip(ds.samples, feeds, strict=True):
        im = Image.open(ds.folder / ref.file).convert("RGB").resize((73, 73), Image.BILINEAR).crop((4, 4, 68, 68))
        x = (np.asarray(im, np.float32)[..., ::-1] - CAFFE_MEAN)[None]
        np.testing.assert_allclose(feed["data"], x, atol=1e-4)
        by_hand.append(int(session.run(None, {"data": x})[0].argmax()))
        studio.append(int(session.run(None, feed)[0].argmax()))
    labels = [s.label for s in ds.samples]
    assert by_hand == studio == [1 if lab in ("chelsea", "coffee") else 0 for lab in labels]
    wrong = api.dataset_with_recipe(ds, api.preprocessing_recipe(file="imagenet"))
    wrong_preds = [int(session.run(None, f)[0].argmax()) for f in api.preview_dataset(wrong, api.load(CAFFE),
                                                                                      count=len(ds))]
    assert wrong_preds != studio and set(wrong_preds) == {0}


BAD_FILES = [
    ({"colour": "BGR"}, ["unknown recipe field 'colour'", "did you mean 'color'", "fields: resize"]),
    ({"color": "GBR"}, ["color must be one of RGB, BGR, L", "'GBR'"]),
    ({"mean": [1, 2]}, ["mean must be 1 or 3 numbers"]),
    ({"std": [1, 0, 1]}, ["std values must be non-zero"]),
    ({"size": "big"}, ["size must be HEIGHTxWIDTH"]),
    ({"layout": "CHW"}, ["layout must be one of auto, NCHW, NHWC"]),
    ({"resize": "zoom"}, ["resize must be one of stretch, letterbox, center-crop"]),
    ({"dtype": "int4"}, ["dtype must be one of auto, float32"]),
    ({"scale": -1}, ["scale must be a positive number"]),
    ({"preset": "vgg"}, ["preset must be one of imagenet, caffe"]),
    ({"dtype": "uint8", "mean": [1, 1, 1]}, ["dtype uint8 carries the pixels as they are"]),
    ([1, 2, 3], ["must be a JSON object of recipe fields"]),
    ('{"mean": [1, 2', ["not valid JSON (line 1"]),
]


@pytest.mark.parametrize("content, expected", BAD_FILES, ids=[str(i) for i in range(len(BAD_FILES))])
def test_bad_recipe_files_are_one_line_errors_naming_the_field(tmp_path, capsys, content, expected):
    bad = tmp_path / "bad.json"
    bad.write_text(content if isinstance(content, str) else json.dumps(content))
    crops = _crops(tmp_path / "crops")
    assert crops
    assert main(["data", "add", str(tmp_path / "crops"), "--project", "r3", "--name", "x", "--model", CAFFE,
                 "--recipe", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: recipe file bad.json: ")
    for text in expected:
        assert text in err
    assert "r3" not in [p.name for p in api.list_projects()]        # refused before the project was made


def test_bad_flags_name_the_flag_and_recipe_flags_without_a_dataset_are_refused(tmp_path, capsys):
    _crops(tmp_path / "crops")
    assert main(["data", "add", str(tmp_path / "crops"), "--project", "r4", "--scale", "abc"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --scale: scale must be a positive number such as 1, 0.0039215686 or 1/255; got 'abc'"
    assert main(["data", "add", str(tmp_path / "crops"), "--project", "r4", "--color", "RGB", "--bgr"]) == 2
    assert "give --color or --bgr, not both" in capsys.readouterr().err
    assert main(["compare", CAFFE, CAFFE, "--recipe", "caffe"]) == 2
    assert "--recipe set the preprocessing of a dataset: add --project NAME --dataset NAME" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the suggestion's reasons

def _model(shape, leading=(), metadata=(), dtype=TensorProto.FLOAT):
    """A model whose image input first goes through ``leading`` (op, constant) steps."""
    nodes, inits, cur = [], [], "x"
    for i, (op, const) in enumerate(leading):
        inits.append(numpy_helper.from_array(np.asarray(const, np.float32), f"c{i}"))
        nodes.append(helper.make_node(op, [cur, f"c{i}"], [f"t{i}"], name=f"/n{i}"))
        cur = f"t{i}"
    nodes.append(helper.make_node("ReduceMean", [cur], ["y"], keepdims=0, name="/r"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    for k, v in metadata:
        m.metadata_props.add(key=k, value=v)
    return m


def _suggest(model):
    from studio.core.preprocess_suggest import suggest_recipe

    return suggest_recipe(model)


def test_suggestion_on_the_caffe_and_imagenet_samples_says_why():
    recipe, reason = api.suggest_preprocessing(api.load(CAFFE))
    assert (recipe.color, recipe.scale, recipe.mean, recipe.layout) == ("BGR", 1.0, (103.939, 116.779, 123.68),
                                                                        "NHWC")
    for text in ("input 'data' is NHWC float32 [batch, 64, 64, 3]", "a Transpose to NCHW follows it",
                 "no normalization in the graph", "mean_values=103.939,116.779,123.68", "color_order=BGR",
                 "→ Caffe-style: BGR pixels 0–255 minus that mean"):
        assert text in reason, (text, reason)
    assert "guess" not in reason
    recipe, reason = api.suggest_preprocessing(api.load(str(path_of("imagenet_classifier"))))
    assert recipe.preset == "imagenet" and recipe.color == "RGB"
    assert reason == ("input 'input' is NCHW float32 [1, 3, 224, 224]; no normalization in the graph; no "
                      "preprocessing metadata → ImageNet mean/std on RGB 0–1 (a guess: change it if your model "
                      "differs)")


def test_suggestion_reads_the_graphs_own_normalization():
    # a Caffe graph that subtracts its BGR mean itself: feed BGR 0..255 and subtract nothing
    recipe, reason = _suggest(_model((1, 64, 64, 3), [("Sub", np.reshape(CAFFE_MEAN, (1, 1, 1, 3)))]))
    assert (recipe.color, recipe.scale, recipe.mean, recipe.std, recipe.layout) == ("BGR", 1.0, (0.0,) * 3,
                                                                                  (1.0,) * 3, "NHWC")
    assert "the graph first subtracts a 3-value constant (103.9, 116.8, 123.7) (in 0..255 units)" in reason
    assert "B,G,R order" in reason and "the graph normalizes them itself" in reason
    # /255 then ImageNet mean/std in the graph, RGB order: raw RGB pixels
    recipe, reason = _suggest(_model((1, 3, 32, 32), [("Div", [255.0]),
                                                      ("Sub", np.reshape(IMAGENET_MEAN, (1, 3, 1, 1))),
                                                      ("Div", np.reshape(IMAGENET_STD, (1, 3, 1, 1)))]))
    assert (recipe.color, recipe.scale, recipe.mean) == ("RGB", 1.0, (0.0,) * 3)
    assert "divides by a 1-value constant (255), then Sub/Div" in reason and "R,G,B order" in reason
    # the ImageNet mean on 0..1 input, no /255: RGB scaled to 0..1
    recipe, reason = _suggest(_model((1, 3, 32, 32), [("Sub", np.reshape(IMAGENET_MEAN, (1, 3, 1, 1)))]))
    assert (recipe.color, recipe.scale) == ("RGB", pytest.approx(1 / 255)) and "(in 0..1 units)" in reason


def test_suggestion_reads_metadata_and_says_when_it_guesses():
    recipe, reason = _suggest(_model((1, 3, 32, 32), metadata=[("Image.BitmapPixelFormat", "Bgr8"),
                                                              ("Image.NominalPixelRange", "NominalRange_0_255")]))
    assert (recipe.color, recipe.scale, recipe.mean) == ("BGR", 1.0, (0.0,) * 3)
    assert "Image.BitmapPixelFormat=Bgr8" in reason and "Image.NominalPixelRange=NominalRange_0_255" in reason
    recipe, reason = _suggest(_model((1, 3, 32, 32), metadata=[("preprocessing", json.dumps(
        {"preset": "caffe", "resize": "stretch"}))]))
    assert recipe.color == "BGR" and recipe.resize == "stretch" and "metadata gives a preprocessing recipe" in reason
    recipe, reason = _suggest(_model((1, 224, 224, 3)))
    assert recipe.mean == tuple(IMAGENET_MEAN.tolist()) or recipe.preset == "imagenet"
    assert "NHWC" in reason and "a guess" in reason and "Caffe-style BGR 0–255 minus mean" in reason
    recipe, reason = _suggest(_model((1, 1, 28, 28)))
    assert recipe.color == "L" and "one channel" in reason
    recipe, reason = _suggest(_model((1, 3, 32, 32), dtype=TensorProto.UINT8))
    assert recipe.scale == 1.0 and "takes uint8" in reason


def test_precision_on_a_dataset_takes_the_recipe_of_the_command_line_for_this_run(tmp_path, capsys):
    """The stored recipe is ImageNet; --recipe FILE makes the golden outputs and the judged inputs Caffe's
    (golden outputs are kept per recipe), and the dataset keeps its own recipe."""
    from studio.data.datasets import recipe_fingerprint

    project = api.open_project("r5", create=True)
    ds = api.add_dataset(project, PHOTO_DIR, name="photos", preset="imagenet")
    recipe_file = SAMPLE_DIR / "caffe_classifier.recipe.json"
    assert main(["precision", CAFFE, "--project", "r5", "--dataset", "photos", "--recipe", str(recipe_file),
                 "--variants", "fp32", "--target", "top1-agreement>=0.99", "--budget", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "preprocess   custom: center-crop to the model's size, BGR, x1, minus 103.9,116.8,123.7" in out
    assert f"given for this run: --recipe {recipe_file}" in out
    caffe = api.dataset_with_recipe(ds, api.preprocessing_recipe(file=recipe_file))
    golden = {p.stem.rsplit("-", 1)[-1] for p in (ds.folder / "golden").glob("*.npz")}
    assert golden == {recipe_fingerprint(caffe)} != {recipe_fingerprint(ds)}
    assert api.dataset(project, "photos").recipe.preset == "imagenet"
