"""Preprocessing options for every command that creates or uses a dataset.

Every field of the recipe has a flag (``--resize --image-size --scale --mean --std
--color/--bgr --layout --dtype --interpolation --pad-value --crop-ratio``), and
``--recipe FILE.json`` (or a preset name) gives a whole recipe; flags change what
the file, the preset or the dataset's stored recipe says. Values are validated by
the recipe itself: one-line errors naming the field and its allowed values.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from studio import api
from studio.core.errors import StudioError
from studio.cli.project_args import kept
from studio.core.error_codes import ErrorCode
from studio.core.requests import RecipeRequest

#: recipe field -> (flag, argparse dest, help)
FLAGS: dict[str, tuple[str, str, str]] = {
    "resize": ("--resize", "resize", "stretch, letterbox, center-crop, keep-height or none"),
    "size": ("--image-size", "image_size", "HxW the image is resized to (default: the model's input size)"),
    "scale": ("--scale", "scale", "pixels are multiplied by this first (1 for 0..255, 1/255 for 0..1)"),
    "mean": ("--mean", "mean", "per-channel mean subtracted after scaling, in the order the model gets the "
                               "channels (Caffe BGR: 103.939,116.779,123.68)"),
    "std": ("--std", "std", "per-channel std divided by after the mean"),
    "color": ("--color", "color", "channel order the model takes: RGB, BGR or L (grey)"),
    "layout": ("--layout", "layout", "auto, NCHW or NHWC"),
    "dtype": ("--dtype", "dtype", "auto (the model input's), float32, float16, float64 or uint8"),
    "interpolation": ("--interpolation", "interpolation", "bilinear, nearest, bicubic or lanczos"),
    "pad_value": ("--pad-value", "pad_value", "letterbox / keep-height padding, 0..255"),
    "crop_ratio": ("--crop-ratio", "crop_ratio", "center-crop: the short side is resized to size / ratio first"),
}
BASIC = ("size", "layout", "mean", "std")          # also defined by studio.cli.inputs_args (with --bgr)


def add_recipe_arguments(p: argparse.ArgumentParser, *, basic: bool = True, title: str | None = None) -> None:
    """The recipe flags; ``basic=False`` where ``--image-size --layout --mean --std --bgr`` exist already
    (studio.cli.inputs_args: they then also apply to the dataset)."""
    g = p.add_argument_group(title or "preprocessing of image datasets (every recipe field)")
    g.add_argument("--recipe", metavar="FILE.json|PRESET",
                   help="a recipe file (JSON object of the fields below; 'preset' starts from a preset) or a "
                        "preset: imagenet, caffe, yolo, clip, text-strip, grayscale, raw")
    for field, (flag, dest, text) in FLAGS.items():
        if field in BASIC and not basic:
            continue
        g.add_argument(flag, dest=dest, metavar=field.upper().replace("_", "-") if field != "size" else "HxW",
                       help=text)
    if basic:
        g.add_argument("--bgr", action="store_true", help="the same as --color BGR")
    p.set_defaults(_recipe_basic=basic)


def recipe_changes(args: argparse.Namespace) -> dict[str, str]:
    """{field: value as typed} for the recipe flags given."""
    own = getattr(args, "_recipe_basic", True)
    changes: dict[str, str] = {}
    for field, (_flag, dest, _text) in FLAGS.items():
        value = getattr(args, dest, None)
        if value is None or (field == "layout" and value == "auto" and not own):   # inputs_args' default
            continue
        changes[field] = value
    if getattr(args, "bgr", False):
        if changes.get("color", "BGR").upper() != "BGR":
            raise StudioError("give --color or --bgr, not both", code=ErrorCode.BAD_OPTION)
        changes["color"] = "BGR"
    return changes


def given(args: argparse.Namespace) -> str:
    """The recipe options on the command line, as typed ("" when none)."""
    return given_in(getattr(args, "recipe", None), request_of(args))


def given_in(file: str | None, request: RecipeRequest) -> str:
    """A request's recipe options (``--recipe FILE`` and the fields' flags) as typed ("" when none)."""
    return request.given(file)


def request_of(args: argparse.Namespace) -> RecipeRequest:
    """The one ``RecipeRequest`` the recipe flags ask for (what the recipe editor's ``data recipe`` hint
    prints); ``--recipe FILE|PRESET`` is the call's."""
    return RecipeRequest(fields=recipe_changes(args))


def recipe_from_args(args: argparse.Namespace, base=None):
    """The recipe the command line gives (on top of ``base``), or None when it gives none."""
    return recipe_of(getattr(args, "recipe", None), request_of(args), base)


def recipe_of(file: str | None, request: RecipeRequest, base=None):
    """The recipe ``--recipe FILE|PRESET`` and the fields of ``request`` give (on top of ``base``), or None when
    they give none."""
    if not file and not request.changes:
        return None
    with flags_named(request):
        return api.preprocessing_recipe(base, file=file, changes=request)


@contextlib.contextmanager
def flags_named(request: RecipeRequest) -> Iterator[None]:
    """The one-line error of a field ``request`` sets names the flag the user typed (``--mean: mean must ...``);
    a recipe file's own errors stay as they are."""
    try:
        yield
    except StudioError as exc:
        field = next((k for k in request.changes if str(exc).startswith(f"{k} must")), None)
        if field is None:
            raise
        raise StudioError(f"{FLAGS[field][0]}: {exc}", code=exc.code) from None


def project_dataset(args: argparse.Namespace):
    """The ``--dataset`` of the ``--project`` (None without ``--dataset``), with the command line's recipe for
    this run (:func:`dataset_for_run`)."""
    dataset = None
    if args.dataset:
        if kept(args) is None:
            raise StudioError("--dataset names a dataset of a project: add --project NAME")
        dataset = api.dataset(kept(args).project, args.dataset)
    return dataset_for_run(args, dataset)


def dataset_for_run(args: argparse.Namespace, dataset):
    """``dataset`` with the command line's recipe for this run (not saved). Extra recipe flags
    without a dataset are an error rather than silently ignored."""
    if dataset is None:
        extra = [FLAGS[k][0] for k in recipe_changes(args) if k not in BASIC and k != "color"]
        extra += ["--recipe"] if getattr(args, "recipe", None) else []
        extra += ["--color"] if getattr(args, "color", None) else []
        if extra:
            raise StudioError(f"{', '.join(extra)} set the preprocessing of a dataset: add --project NAME "
                              "--dataset NAME", code=ErrorCode.BAD_OPTION)
        return None
    return dataset_with(dataset, getattr(args, "recipe", None), request_of(args))


def dataset_with(dataset, file: str | None, request: RecipeRequest):
    """``dataset`` with the recipe ``file`` and ``request`` give for this run (not saved); as it is when none."""
    recipe = recipe_of(file, request, dataset.recipe)
    if recipe is None:
        return dataset
    return api.dataset_with_recipe(dataset, recipe, reason=f"given for this run: {given_in(file, request)}")
