"""Datasets: representative samples a model is calibrated and judged on.

A dataset is a folder (inside a project's ``data/``) holding copies of the samples
and ``dataset.json``: its kind, the sample list with labels, what was skipped and
why, the preprocessing recipe (data, see :mod:`studio.core.preprocess`) and a fixed
split into calibration and evaluation parts. Imports never touch the source:
files are copied in (a zip is validated before anything is unpacked); unreadable
files are listed and skipped with a count. Kinds: images (PNG/JPEG/BMP/WebP),
audio (PCM WAV), text (JSONL feed dicts or token ids, or raw lines with a ``tokenizer.json``; a JSONL
line's ``label`` and ``part``: a golden set whose every line names its part keeps that split),
tensors (.npz/.npy) and a data-loader script (``load_data()`` yielding feed dicts,
Polygraphy's convention) that runs in the sandbox worker, and only when the user
chose the script kind: ``auto`` never picks a .py file (a stray ``setup.py`` beside
images is listed as ignored), since a loader script is the user's code, executed as them.
"""

from __future__ import annotations

import json
import secrets
import shutil
import wave
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
from onnx import ModelProto

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.fmt import printable
from studio.core.feeds import Feeds, InputSpec, check_array_header, choose_dims, input_specs, load_npz
from studio.core.paths import atomic_write_text, check_regular_file, safe_child, safe_name
from studio.core.preprocess import (IMAGE_SUFFIXES, MAX_IMAGE_BYTES, Recipe, apply_recipe, channel_layout,
                                    image_size_of, load_image)
from studio.core.preprocess_suggest import suggest_recipe
from studio.core.uploads import MAX_UNPACKED_BYTES, ZipLimits, unpack_zip
from studio.core.tensor_safety import npz_headers, read_npy_header
from studio.data.loader_script import run_loader_script
from studio.core.feeds import random_feeds
from studio.core.preprocess import check_recipe_range
from studio.core.tensor_safety import load_npy

KINDS = ("image", "audio", "text", "tensor", "script")
AUDIO_SUFFIXES = (".wav",)
TEXT_SUFFIXES = (".jsonl", ".txt")
TENSOR_SUFFIXES = (".npz", ".npy")
MAX_SAMPLES = 10_000
MAX_SAMPLE_BYTES = 256 * 2**20
#: Memory one sample may take once decoded (its arrays, or an image while it is preprocessed).
SAMPLE_MEMORY_BYTES = 2 * 2**30
#: JSON nesting a JSONL sample may have (a [1, seq] token list is 3 deep); deeper is refused, never recursed.
MAX_JSON_DEPTH = 32
#: Bytes per value while an image is preprocessed: the uint8 picture, ~3 float32 working copies, the output.
_IMAGE_WORK_BYTES = 1 + 3 * 4
MANIFEST = "dataset.json"
PARTS = ("calibration", "evaluation")
SCHEMA = 1


@dataclass(frozen=True)
class SampleRef:
    """One sample: its file inside the dataset folder (or a line of it), and its label."""

    index: int
    file: str
    label: str | None = None
    line: int | None = None          # text datasets: the line of ``file``

    def to_dict(self) -> dict:
        return {"index": self.index, "file": self.file, "label": self.label, "line": self.line}


@dataclass(frozen=True)
class Dataset:
    """A dataset as stored: samples, what was skipped, its recipe and split."""

    id: str
    name: str
    kind: str
    folder: Path
    samples: tuple[SampleRef, ...]
    skipped: tuple[tuple[str, str], ...] = ()     # (source name, reason)
    recipe: Recipe | None = None
    recipe_reason: str = ""
    calibration: tuple[int, ...] = ()
    evaluation: tuple[int, ...] = ()
    classes: tuple[str, ...] = ()                 # label names, in index order
    options: Mapping[str, object] = field(default_factory=dict)   # seq_len, sample_rate, tokenizer...

    def __len__(self) -> int:
        return len(self.samples)

    def part(self, name: str) -> tuple[SampleRef, ...]:
        if name == "all":
            return self.samples
        if name not in ("calibration", "evaluation"):
            raise StudioError(f"dataset part must be calibration, evaluation or all, got {name[:20]!r}",
                              code=ErrorCode.BAD_OPTION)
        wanted = set(self.calibration if name == "calibration" else self.evaluation)
        return tuple(s for s in self.samples if s.index in wanted)

    def label_index(self, label: str | None) -> int | None:
        if label is None:
            return None
        if label in self.classes:
            return self.classes.index(label)
        return int(label) if label.lstrip("-").isdigit() else None

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "id": self.id, "name": self.name, "kind": self.kind,
                "samples": [s.to_dict() for s in self.samples],
                "skipped": [{"source": n, "reason": r} for n, r in self.skipped],
                "recipe": self.recipe.to_dict() if self.recipe else None, "recipe_reason": self.recipe_reason,
                "calibration": list(self.calibration), "evaluation": list(self.evaluation),
                "classes": list(self.classes), "options": dict(self.options)}

    def summary(self) -> str:
        skipped = f", {len(self.skipped)} skipped" if self.skipped else ""
        return (f"{self.name}: {len(self.samples)} {self.kind} sample(s){skipped}; calibration "
                f"{len(self.calibration)}, evaluation {len(self.evaluation)}")


# ---------------------------------------------------------------------------- import

#: Why a .py file beside the samples is not used: code runs only when the user chose a script dataset (R65).
PY_IGNORED = "ignored: a .py file is never run unless you choose the script kind (--kind script)"


def _kind_of(files: Sequence[Path]) -> str:
    """The kind the files hold. Never "script": a .py file is code, and code runs only when the
    user says so (``--kind script``); a stray one beside images is listed as ignored."""
    suffixes = {p.suffix.lower() for p in files}
    for kind, group in (("image", IMAGE_SUFFIXES), ("audio", AUDIO_SUFFIXES),
                        ("tensor", TENSOR_SUFFIXES), ("text", TEXT_SUFFIXES)):
        if suffixes & set(group):
            return kind
    scripts = [p for p in files if p.suffix.lower() == ".py"]
    if scripts:
        raise StudioError(f"'{safe_name(scripts[0].name)}' is a data-loader script and no samples were found "
                          "beside it; a script runs (as you, with your rights) only when you choose it: "
                          "add --kind script", code=ErrorCode.BAD_OPTION)
    raise StudioError("no samples found: give images (png/jpg/bmp/webp), WAV audio, .jsonl/.txt text, "
                      ".npz/.npy tensors, or a data-loader .py script with --kind script")


def _walk(folder: Path, limit: int) -> list[Path]:
    """Regular files below ``folder`` (no symlinks followed), sorted, at most ``limit``."""
    out: list[Path] = []
    for p in sorted(folder.rglob("*")):
        if p.is_symlink() or not p.is_file():
            continue
        if any(part.startswith(".") for part in p.relative_to(folder).parts):
            continue
        out.append(p)
        if len(out) > limit:
            raise StudioError(f"the dataset has more than {limit} files; give a smaller folder",
                              code=ErrorCode.TOO_LARGE)
    return out


def _unpack_zip(path: Path, into: Path) -> Path:
    """The archive's members unpacked (streamed) into ``into``: each at most a sample's size, 8 GiB and
    200:1 in all, paths that climb out refused (:mod:`studio.core.uploads`)."""
    check_regular_file(path, max_bytes=MAX_UNPACKED_BYTES, label="dataset archive")
    try:
        unpack_zip(path, into, ZipLimits(max_members=2 * MAX_SAMPLES + 10, max_member_bytes=MAX_SAMPLE_BYTES))
    except StudioError as exc:
        raise StudioError(f"dataset archive '{safe_name(path.name)}': {exc}", code=exc.code) from None
    return into


def _split(indices: Sequence[int], calibration_fraction: float, seed: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if not 0 <= calibration_fraction <= 1:
        raise StudioError("the calibration fraction must be between 0 and 1", code=ErrorCode.BAD_OPTION)
    order = np.random.default_rng(seed).permutation(len(indices))
    n_cal = int(round(len(indices) * calibration_fraction))
    if len(indices) >= 2 and 0 < calibration_fraction < 1:
        n_cal = min(max(n_cal, 1), len(indices) - 1)
    cal = tuple(sorted(int(indices[i]) for i in order[:n_cal]))
    ev = tuple(sorted(int(indices[i]) for i in order[n_cal:]))
    return cal, ev


def _parts_split(parts: Mapping[int, str], count: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The split the samples name themselves (every one a ``part``, both parts present), else None (a
    seeded random split then): a golden set keeps its held-out samples out of calibration."""
    if len(parts) != count or set(parts.values()) != set(PARTS):
        return None
    return (tuple(i for i, p in sorted(parts.items()) if p == "calibration"),
            tuple(i for i, p in sorted(parts.items()) if p == "evaluation"))


def _read_labels(folder: Path) -> dict[str, str]:
    """labels.json ({file: label}) or labels.csv (file,label) beside the samples, if any."""
    for name in ("labels.json", "labels.csv"):
        p = folder / name
        if p.is_file() and not p.is_symlink():
            check_regular_file(p, max_bytes=64 * 2**20, label="labels file")
            text = p.read_text(encoding="utf-8", errors="replace")
            if name.endswith(".json"):
                try:
                    data = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise StudioError(f"labels.json is not valid JSON (line {exc.lineno})") from None
                if not isinstance(data, dict):
                    raise StudioError("labels.json must map file names to labels")
                return {str(k): str(v) for k, v in data.items()}
            out = {}
            for line in text.splitlines():
                if "," in line:
                    f, _, label = line.partition(",")
                    if f.strip() and f.strip().lower() != "file":
                        out[f.strip()] = label.strip()
            return out
    return {}


def _check_image(p: Path) -> str | None:
    return _read_error(p, MAX_IMAGE_BYTES, "image", lambda: load_image(p, "RGB"))


def _check_wav(p: Path) -> str | None:
    return _read_error(p, MAX_SAMPLE_BYTES, "audio file", lambda: read_wav(p))


def _read_error(p: Path, max_bytes: int, label: str, read: Callable[[], object]) -> str | None:
    """Why the sample ``p`` cannot be used (not a regular file, too large, ``read()`` refuses it), or None."""
    try:
        check_regular_file(p, max_bytes=max_bytes, label=label)
        read()
    except StudioError as exc:
        return str(exc)
    return None


def _check_tensor(p: Path) -> str | None:
    """Why the .npy/.npz ``p`` cannot be a sample, from its headers alone (numeric dtype, shape x
    itemsize within the sample memory budget and within the file), or None."""
    try:
        st = check_regular_file(p, max_bytes=MAX_SAMPLE_BYTES, label="tensor file")
        if p.suffix.lower() == ".npy":
            with open(p, "rb") as fh:
                read_npy_header(fh, st.st_size, label="the file", max_bytes=SAMPLE_MEMORY_BYTES)
        else:
            npz_headers(p, label="the file", max_bytes=SAMPLE_MEMORY_BYTES)
    except StudioError as exc:
        return str(exc)
    except OSError:
        return "not a readable .npy/.npz file"
    return None


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """Mono float32 samples in [-1, 1] and the sample rate of a PCM WAV file."""
    try:
        with wave.open(str(path), "rb") as w:
            rate, width, channels, frames = w.getframerate(), w.getsampwidth(), w.getnchannels(), w.getnframes()
            if frames > 60 * 60 * 48_000:
                raise StudioError("audio longer than an hour")
            raw = w.readframes(frames)
    except (wave.Error, EOFError, OSError):
        raise StudioError("cannot be read as a PCM WAV file") from None
    dtype = {1: np.uint8, 2: np.int16, 4: np.int32}.get(width)
    if dtype is None:
        raise StudioError(f"WAV sample width of {width} bytes is not supported (8/16/32-bit PCM)")
    data = np.frombuffer(raw, dtype=dtype).astype(np.float32)
    if width == 1:
        data = (data - 128.0) / 128.0
    else:
        data = data / float(2 ** (8 * width - 1))
    if channels > 1:
        data = data.reshape(-1, channels).mean(axis=1)
    return data, rate


def _text_samples(files: Sequence[Path], root: Path
                  ) -> tuple[list[tuple[str, int, str | None, str | None]], list[tuple[str, str]]]:
    """(file, line, label, part) per usable line; (name, reason) per unusable one. A .jsonl line may name
    its ``part`` (calibration or evaluation): a golden set keeps its split (:func:`_parts_split`)."""
    found, skipped = [], []
    for p in files:
        if p.suffix.lower() not in TEXT_SUFFIXES or p.name.startswith("labels."):
            continue
        rel = p.relative_to(root).as_posix()
        check_regular_file(p, max_bytes=MAX_SAMPLE_BYTES, label="text file")
        for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines()):
            if not line.strip():
                continue
            label = part = None
            if p.suffix.lower() == ".jsonl":
                try:
                    obj = json_line(line)
                except StudioError as exc:
                    skipped.append((f"{rel}:{i + 1}", str(exc)))
                    continue
                label = None if obj.get("label") is None else str(obj["label"])[:200]
                part = None if obj.get("part") is None else str(obj["part"])[:40]
                if part is not None and part not in PARTS:
                    skipped.append((f"{rel}:{i + 1}", f"part {part!r} is not one of {', '.join(PARTS)}"))
                    continue
            found.append((rel, i, label, part))
            if len(found) > MAX_SAMPLES:
                raise StudioError(f"more than {MAX_SAMPLES} text samples", code=ErrorCode.TOO_LARGE)
    return found, skipped


def json_depth(text: str) -> int:
    """How deeply ``text``'s JSON nests (brackets outside strings), counted without parsing, so a
    line nested thousands of levels deep is refused instead of hitting Python's recursion limit."""
    import re

    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text).encode("utf-8", "surrogateescape")
    b = np.frombuffer(bare, np.uint8)
    steps = (b == ord("[")).astype(np.int32) + (b == ord("{")) - (b == ord("]")) - (b == ord("}"))
    return int(np.cumsum(steps).max(initial=0)) if steps.size else 0


def json_line(line: str) -> dict:
    """One JSONL line as an object: its nesting checked (:data:`MAX_JSON_DEPTH`) before it is parsed.
    The error says what is wrong with the line ("not valid JSON"); callers name the line."""
    depth = json_depth(line)
    if depth > MAX_JSON_DEPTH:
        raise StudioError(f"JSON nested {depth} levels deep, over the limit of {MAX_JSON_DEPTH}",
                          code=ErrorCode.BAD_INPUT)
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError, ValueError):
        raise StudioError("not valid JSON", code=ErrorCode.BAD_INPUT) from None
    if not isinstance(obj, dict):
        raise StudioError("not a JSON object", code=ErrorCode.BAD_INPUT)
    return obj


def source_path(source: str | Path) -> Path:
    """The dataset source as a path, or one line when there is nothing there (checked before a project or a
    dataset folder is created for it)."""
    src = Path(source)
    if not src.exists():
        raise StudioError(f"dataset source '{safe_name(src.name)}' does not exist", code=ErrorCode.NOT_FOUND)
    return src


def import_dataset(source: str | Path, dest_root: str | Path, *, name: str | None = None, kind: str = "auto",
                   model: ModelProto | None = None, recipe: Recipe | None = None,
                   calibration_fraction: float = 0.5, seed: int = 0, tokenizer: str | Path | None = None,
                   options: Mapping[str, object] | None = None, max_samples: int = MAX_SAMPLES,
                   recipe_reason: str | None = None) -> Dataset:
    """Copy the samples of ``source`` (a folder, a zip, or one .npz/.py/.jsonl file) into a new
    dataset folder under ``dest_root`` and return it. ``model`` suggests the recipe, unless
    ``recipe`` is given (``recipe_reason``: where it came from)."""
    src = source_path(source)
    dest_root = Path(dest_root)
    dest_root.mkdir(parents=True, exist_ok=True)
    ds_id = secrets.token_hex(6)
    folder = dest_root / ds_id
    staging = dest_root / f".{ds_id}.staging"
    staging.mkdir()
    try:
        files_root = staging / "samples"
        files_root.mkdir()
        if src.is_dir():
            src_root, src_files = src, _walk(src, max_samples * 2 + 10)
        elif src.suffix.lower() == ".zip":
            src_root = _unpack_zip(src, staging / "unpacked")
            src_files = _walk(src_root, max_samples * 2 + 10)
        else:
            real = src.resolve() if src.is_symlink() else src   # the file the user named, never a link copied in
            src_root, src_files = real.parent, [real]
        if kind == "auto":
            kind = _kind_of(src_files)
        if kind not in KINDS:
            raise StudioError(f"dataset kind must be one of {', '.join(KINDS)}", code=ErrorCode.BAD_OPTION)
        labels = _read_labels(src_root) if src.is_dir() or src.suffix.lower() == ".zip" else {}
        samples, skipped, parts = _collect(kind, src_root, src_files, files_root, labels, max_samples)
        opts = dict(options or {})
        if tokenizer is not None:
            tok = Path(tokenizer)
            check_regular_file(tok, max_bytes=64 * 2**20, label="tokenizer file")
            shutil.copyfile(tok, staging / "tokenizer.json", follow_symlinks=False)  # scratch: into our staging folder
            opts["tokenizer"] = "tokenizer.json"
        reason = ""
        if kind == "image" and recipe is None:
            recipe, reason = suggest_recipe(model) if model is not None else (Recipe(preset="custom"),
                                                                             "no model given: plain 0..1 pixels")
        elif recipe is not None:
            reason = (recipe_reason or "given")[:300]
        if not samples:
            first = f" (first: {skipped[0][0][:40]}: {skipped[0][1][:240]})" if skipped else ""
            raise StudioError(f"no usable samples in the dataset source{first}")
        cal, ev = _parts_split(parts, len(samples)) or _split([s.index for s in samples], calibration_fraction, seed)
        classes = tuple(sorted({s.label for s in samples if s.label is not None and not s.label.lstrip('-').isdigit()}))
        ds = Dataset(ds_id, (name or src.stem or "dataset")[:80], kind, folder, tuple(samples), tuple(skipped),
                     recipe if kind == "image" else None, reason, cal, ev, classes, opts)
        if (staging / "unpacked").exists():
            shutil.rmtree(staging / "unpacked")  # scratch: our own staging folder
        atomic_write_text(staging / MANIFEST, json.dumps(ds.to_dict(), indent=1))
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # scratch: our own staging folder
        raise
    return ds


def _collect(kind: str, src_root: Path, files: Sequence[Path], into: Path, labels: Mapping[str, str],
             max_samples: int) -> tuple[list[SampleRef], list[tuple[str, str]], dict[int, str]]:
    """The samples copied into ``into``, what was skipped and why, and the part each sample named (JSONL)."""
    samples: list[SampleRef] = []
    parts: dict[int, str] = {}
    skipped: list[tuple[str, str]] = []
    if kind != "script":
        skipped = [(p.relative_to(src_root).as_posix()[:200], PY_IGNORED) for p in files if p.suffix.lower() == ".py"]
    if kind == "text":
        found, text_skipped = _text_samples(files, src_root)
        skipped += text_skipped
        copied: dict[str, str] = {}
        for rel, line, label, part in found[:max_samples]:
            if rel not in copied:
                target = safe_child(into, PurePosixPath(*[safe_name(p, default="_") for p in PurePosixPath(rel).parts]))
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src_root / rel, target, follow_symlinks=False)  # scratch: into our staging
                copied[rel] = target.relative_to(into.parent).as_posix()
            if part is not None:
                parts[len(samples)] = part
            samples.append(SampleRef(len(samples), copied[rel], label, line))
        return samples, skipped, parts
    if kind == "script":
        scripts = [p for p in files if p.suffix.lower() == ".py"]
        if len(scripts) != 1:
            raise StudioError(f"a data-loader dataset is one .py file defining load_data(); found {len(scripts)}")
        count = run_loader_script(scripts[0], into, limit=max_samples)
        return [SampleRef(i, f"samples/{i:05d}.npz") for i in range(count)], [], {}
    suffixes = {"image": IMAGE_SUFFIXES, "audio": AUDIO_SUFFIXES, "tensor": TENSOR_SUFFIXES}[kind]
    check = {"image": _check_image, "audio": _check_wav, "tensor": _check_tensor}[kind]
    for p in files:
        rel = p.relative_to(src_root)
        if p.name in ("labels.json", "labels.csv") or p.suffix.lower() == ".py":
            continue              # a .py was listed as ignored above
        if p.suffix.lower() not in suffixes:
            skipped.append((rel.as_posix()[:200], f"not a {kind} file ({p.suffix or 'no suffix'})"))
            continue
        problem = check(p)
        if problem:
            skipped.append((rel.as_posix()[:200], problem))
            continue
        if len(samples) >= max_samples:
            skipped.append((rel.as_posix()[:200], f"over the limit of {max_samples} samples"))
            continue
        safe_parts = [safe_name(part, default="_") for part in rel.parts]
        target = safe_child(into, PurePosixPath(*safe_parts[:-1], f"{len(samples):05d}-{safe_parts[-1]}"))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target, follow_symlinks=False)  # scratch: into our staging folder
        # ImageFolder convention: the parent folder names the class; labels.json wins.
        label = labels.get(rel.as_posix()) or labels.get(p.name) or (rel.parts[0] if len(rel.parts) > 1 else None)
        samples.append(SampleRef(len(samples), target.relative_to(into.parent).as_posix(), label))
    return samples, skipped, parts


# ---------------------------------------------------------------------------- reading back

def contained(folder: Path, rel: str, what: str) -> Path:
    """``folder / rel`` for a path read from a manifest, resolved (links followed, ``..`` collapsed) and
    refused unless it stays inside ``folder`` (R66): a damaged or hand-edited manifest reads nothing outside."""
    raw = str(rel)
    root = Path(folder).resolve()
    bad = (not raw or "\x00" in raw or raw.startswith(("/", "\\")) or (len(raw) > 1 and raw[1] == ":")
           or any(part == ".." for part in PurePosixPath(raw.replace("\\", "/")).parts))
    try:
        target = (root / raw).resolve() if not bad else root
    except (OSError, RuntimeError):
        bad, target = True, root
    if bad or target == root or not target.is_relative_to(root):
        raise StudioError(f"the dataset is damaged: its manifest's {what} ({printable(raw, 60)}) points outside "
                          "the dataset folder; nothing was read. Import the dataset again", code=ErrorCode.BAD_CATALOG)
    return target


def load_dataset(folder: str | Path) -> Dataset:
    """The dataset stored in ``folder`` (written by :func:`import_dataset`). Sample paths in the
    manifest are checked to be plain relative names here, and resolved inside the folder at each read."""
    folder = Path(folder)
    manifest = contained(folder, MANIFEST, "manifest")
    try:
        check_regular_file(manifest, max_bytes=64 * 2**20, label="dataset manifest")
        data = json.loads(manifest.read_text(encoding="utf-8"))
        samples = tuple(SampleRef(int(s["index"]), str(s["file"]), None if s.get("label") is None else str(s["label"]),
                                  None if s.get("line") is None else int(s["line"])) for s in data["samples"])
        ds = Dataset(str(data["id"]), str(data["name"]), str(data["kind"]), folder, samples,
                     tuple((str(d["source"]), str(d["reason"])) for d in data.get("skipped", [])),
                     Recipe.from_dict(data["recipe"]) if data.get("recipe") else None,
                     str(data.get("recipe_reason", "")), tuple(int(i) for i in data.get("calibration", ())),
                     tuple(int(i) for i in data.get("evaluation", ())), tuple(str(c) for c in data.get("classes", ())),
                     dict(data.get("options") or {}))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError,
            RecursionError):
        raise StudioError("the dataset manifest is corrupt; import the dataset again",
                          code=ErrorCode.BAD_CATALOG) from None
    for ref in ds.samples:
        if (not ref.file or ref.file.startswith(("/", "\\")) or "\x00" in ref.file
                or any(part == ".." for part in PurePosixPath(ref.file.replace("\\", "/")).parts)):
            raise StudioError(f"the dataset is damaged: sample {ref.index}'s file ({printable(ref.file, 60)}) "
                              "points outside the dataset folder; import the dataset again", code=ErrorCode.BAD_CATALOG)
    return ds


def sample_path(ds: Dataset, ref: SampleRef) -> Path:
    """The file of sample ``ref``, resolved inside the dataset's folder (never a link out of it)."""
    return contained(ds.folder, ref.file, f"sample {ref.index} file")


def with_recipe(ds: Dataset, recipe: Recipe, *, reason: str = "set by the user", save: bool = True) -> Dataset:
    """The dataset with another recipe: saved in its manifest, or (``save=False``) for one run only.
    Golden outputs are kept per recipe (:func:`recipe_fingerprint`), so neither reuses stale ones."""
    from dataclasses import replace

    if ds.kind != "image":
        raise StudioError(f"dataset {ds.name[:40]} holds {ds.kind} samples; a preprocessing recipe applies to "
                          "image datasets", code=ErrorCode.BAD_OPTION)
    new = replace(ds, recipe=recipe, recipe_reason=reason[:300])
    if save:
        atomic_write_text(ds.folder / MANIFEST, json.dumps(new.to_dict(), indent=1))
    return new


def recipe_fingerprint(ds: Dataset) -> str:
    """A short hash of what the recipe does (not its label): "" for datasets without one."""
    import hashlib

    if ds.recipe is None:
        return ""
    fields = {k: v for k, v in ds.recipe.to_dict().items() if k != "preset"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------- feeds

def _sample_error(ds: Dataset, ref: SampleRef, text: str) -> StudioError:
    return StudioError(f"dataset {ds.name[:40]}, sample {ref.index} ({PurePosixPath(ref.file).name[:40]}): {text}",
                       code=ErrorCode.BAD_INPUT)


def _fit_shape(ds: Dataset, ref: SampleRef, spec: InputSpec, arr: np.ndarray) -> np.ndarray:
    """Check a sample's tensor against the input; add a batch axis when only it is missing."""
    if spec.shape is not None and arr.ndim == len(spec.shape) - 1:
        arr = arr[None]
    if spec.shape is not None:
        if arr.ndim != len(spec.shape):
            raise _sample_error(ds, ref, f"input '{spec.name[:40]}' expects rank {len(spec.shape)} "
                                         f"{list(spec.shape)}, got shape {list(arr.shape)}")
        for d, n in zip(spec.shape, arr.shape):
            if isinstance(d, int) and d != n:
                raise _sample_error(ds, ref, f"input '{spec.name[:40]}' expects {list(spec.shape)}, "
                                             f"got {list(arr.shape)}")
    if arr.dtype.kind not in "biufc":
        raise _sample_error(ds, ref, f"input '{spec.name[:40]}' gets {arr.dtype.str} values; only numbers are read")
    want = np.dtype(spec.dtype)
    if arr.dtype != want:
        try:
            check_array_header(spec, arr.shape, arr.dtype, "the sample gives")
        except StudioError as exc:
            raise _sample_error(ds, ref, str(exc)) from None
        arr = arr.astype(want)
    return arr


def _json_array(ds: Dataset, ref: SampleRef, spec: InputSpec, value: object) -> np.ndarray:
    """A JSONL field as an array: ragged rows, strings and integers beyond 64 bits are one line."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError, RecursionError):
        raise _sample_error(ds, ref, f"input '{spec.name[:40]}' is ragged: its rows have different lengths "
                                     "(a tensor needs rows of one length)") from None
    if arr.dtype.kind not in "biuf":
        what = "strings" if arr.dtype.kind in "SU" else "values that are not numbers or beyond 64-bit integers"
        raise _sample_error(ds, ref, f"input '{spec.name[:40]}' holds {what}; only numbers are read")
    return _fit_shape(ds, ref, spec, arr)


def _seq_len(ds: Dataset, spec: InputSpec, chosen: Mapping[str, int]) -> int:
    if ds.options.get("seq_len"):
        return int(ds.options["seq_len"])
    d = (spec.shape or (None, None))[-1]
    return d if isinstance(d, int) else int(chosen.get(d, 128)) if isinstance(d, str) else 128


def dataset_feeds(ds: Dataset, model: ModelProto, *, part: str = "evaluation", limit: int | None = None,
                  dims: Mapping[str, int] | None = None) -> list[Feeds]:
    """Feed dicts for ``part`` of the dataset, preprocessed for ``model``. Inputs the
    samples do not give are seeded as everywhere else in the studio."""
    specs = input_specs(model)
    chosen = choose_dims(specs, dims)
    refs = ds.part(part)[: limit or None]
    if not refs:
        raise StudioError(f"the dataset's {part} part is empty", code=ErrorCode.BAD_INPUT)
    if ds.kind in ("tensor", "script"):      # a script's samples were saved as .npz when it was added
        return _tensor_feeds(ds, refs, specs)
    out: list[Feeds] = []
    tok = None
    for i, ref in enumerate(refs):
        path = sample_path(ds, ref)
        if ds.kind == "image":
            spec = _image_spec(specs)
            layout = channel_layout(spec.shape, ds.recipe.layout if ds.recipe else "auto")
            hint = _hw_hint(spec, chosen, layout)
            recipe = ds.recipe or Recipe()
            size = image_size_of(spec.shape, layout, recipe, hint)
            channels = spec.shape[1] if layout == "NCHW" else spec.shape[3]
            if i == 0:
                _check_recipe_for(ds, recipe, spec)
            _check_image_budget(ds, ref, spec, size, channels)
            try:
                img = load_image(path, "RGB")
            except StudioError as exc:
                raise _sample_error(ds, ref, str(exc)) from None
            if size[1] == -1:          # keep-height: the width follows this picture
                _check_image_budget(ds, ref, spec, (size[0], max(1, round(img.width * size[0] / img.height))), channels)
            arr = apply_recipe(img, recipe, size, layout, spec.dtype, channels if isinstance(channels, int) else None)
            feeds = {spec.name: _fit_shape(ds, ref, spec, arr)}
        elif ds.kind == "audio":
            spec = next((s for s in specs if s.dtype.startswith("float")), None)
            if spec is None:
                raise _sample_error(ds, ref, "the model has no float input for audio")
            data, _rate = read_wav(path)
            length = ds.options.get("length")
            if length:
                data = np.pad(data[: int(length)], (0, max(0, int(length) - len(data))))
            feeds = {spec.name: _fit_shape(ds, ref, spec, data.astype(np.float32))}
        else:  # text
            feeds = {}
            line = _text_line(ds, ref, path)
            if path.suffix.lower() == ".jsonl":
                try:
                    obj = json_line(line)
                except StudioError as exc:
                    raise _sample_error(ds, ref, f"line {(ref.line or 0) + 1}: {exc}") from None
                for s in specs:
                    if s.name in obj:
                        feeds[s.name] = _json_array(ds, ref, s, obj[s.name])
            else:
                if tok is None:
                    tok = _tokenizer(ds)
                ids_spec = next((s for s in specs if s.dtype.startswith("int")), None)
                if ids_spec is None:
                    raise _sample_error(ds, ref, "the model has no integer input for token ids")
                enc = tok.encode(line)
                n = _seq_len(ds, ids_spec, chosen)
                ids = (list(enc.ids) + [0] * n)[:n]
                mask = ([1] * len(enc.ids) + [0] * n)[:n]
                by_role = {"token_ids": ids, "mask": mask, "token_type": [0] * n}
                for s in specs:
                    values = by_role.get(s.role) if s.dtype.startswith("int") else None
                    if values is None and s.dtype.startswith("int") and "ids" in s.name.lower():
                        values = ids
                    if values is not None:
                        feeds[s.name] = _fit_shape(ds, ref, s, np.asarray(values, np.int64))
        missing = tuple(s for s in specs if s.name not in feeds)
        if missing:
            local = dict(chosen)
            for s in specs:
                if s.name in feeds and s.shape is not None:
                    for d, n in zip(s.shape, np.shape(feeds[s.name])):
                        if isinstance(d, str):
                            local[d] = int(n)
            feeds = {**random_feeds(missing, local, seed=i), **feeds}
        out.append(feeds)
    return out


def _text_line(ds: Dataset, ref: SampleRef, path: Path) -> str:
    """The sample's line of its text file (the file's size bounded again: it may have changed)."""
    try:
        check_regular_file(path, max_bytes=MAX_SAMPLE_BYTES, label="text file")
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        return lines[ref.line or 0]
    except StudioError as exc:
        raise _sample_error(ds, ref, str(exc)) from None
    except (IndexError, OSError):
        raise _sample_error(ds, ref, f"line {(ref.line or 0) + 1} is not in the file any more; import the "
                                     "dataset again") from None


def _check_recipe_for(ds: Dataset, recipe: Recipe, spec: InputSpec) -> None:
    """The recipe's numbers against the model input's own type (float16 overflows sooner)."""
    try:
        check_recipe_range(recipe, spec.dtype if spec.dtype in ("float16", "float32", "float64") else "float32")
    except StudioError as exc:
        raise StudioError(f"dataset {ds.name[:40]}, input '{spec.name[:40]}' ({spec.dtype}): {exc}",
                          code=ErrorCode.BAD_OPTION) from None


def _check_image_budget(ds: Dataset, ref: SampleRef, spec: InputSpec, size: tuple[int, int], channels: object) -> None:
    """Refuse, before decoding or allocating, an image size whose preprocessing would not fit one
    sample's memory budget (16384x16384 on a dynamic model: about 13 GiB of working copies)."""
    h, w = size
    if w == -1:
        return
    c = channels if isinstance(channels, int) and channels > 0 else 3
    itemsize = np.dtype(spec.dtype).itemsize if spec.dtype != "bfloat16" else 2
    need = h * w * c * (_IMAGE_WORK_BYTES + itemsize)
    if need > SAMPLE_MEMORY_BYTES:
        raise _sample_error(ds, ref, f"image size {h}x{w} needs about {need / 2**30:.1f} GiB to preprocess one "
                                     f"sample ({c} channels, {spec.dtype}), over the {SAMPLE_MEMORY_BYTES / 2**30:.0f} "
                                     "GiB memory budget of a sample; give a smaller --image-size")


def _tokenizer(ds: Dataset):
    name = ds.options.get("tokenizer")
    if not name:
        raise StudioError("raw-text datasets need a tokenizer.json (give --tokenizer FILE when adding it)")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise StudioError("raw-text datasets need the tokenizers package (pip install tokenizers)") from None
    try:
        return Tokenizer.from_file(str(contained(ds.folder, str(name), "tokenizer")))
    except Exception as exc:  # noqa: BLE001 - the library raises plain Exceptions for bad files
        raise StudioError(f"tokenizer.json cannot be loaded ({type(exc).__name__})") from None


def text_token_ids(ds: Dataset, *, part: str = "evaluation", limit: int | None = None,
                   key: str = "input_ids") -> list[list[int]]:
    """The token ids of a text dataset's samples, unpadded (a decoder's prompts): a .jsonl line's ``key``
    list (or ``ids``/``tokens``), a raw line encoded with the dataset's tokenizer.json."""
    if ds.kind != "text":
        raise StudioError(f"dataset {ds.name[:40]} holds {ds.kind} samples; decoder prompts need a text dataset",
                          code=ErrorCode.BAD_INPUT)
    out: list[list[int]] = []
    tok = None
    for ref in ds.part(part)[: limit or None]:
        path = sample_path(ds, ref)
        line = _text_line(ds, ref, path)
        if path.suffix.lower() == ".jsonl":
            try:
                obj = json_line(line)
            except StudioError as exc:
                raise _sample_error(ds, ref, f"line {(ref.line or 0) + 1}: {exc}") from None
            ids = next((obj[k] for k in (key, "ids", "tokens") if isinstance(obj, dict) and k in obj), None)
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise _sample_error(ds, ref, f"no '{key[:40]}' list of integer token ids in the line")
        else:
            tok = tok or _tokenizer(ds)
            ids = list(tok.encode(line).ids)
        if ids:
            out.append([int(i) for i in ids])
    return out


def _image_spec(specs: Sequence[InputSpec]) -> InputSpec:
    for s in specs:
        if s.kind == "tensor" and s.shape is not None and len(s.shape) == 4:
            return s
    raise StudioError("the model has no 4-D image input; an image dataset cannot feed it", code=ErrorCode.BAD_INPUT)


def _hw_hint(spec: InputSpec, chosen: Mapping[str, int], layout: str) -> tuple[int, int] | None:
    axes = (2, 3) if layout == "NCHW" else (1, 2)
    vals = []
    for a in axes:
        d = spec.shape[a]
        vals.append(d if isinstance(d, int) else chosen.get(d) if isinstance(d, str) else spec.hint(a))
    return (int(vals[0]), int(vals[1])) if all(isinstance(v, int) and v > 0 for v in vals) else None


def _tensor_feeds(ds: Dataset, refs: Sequence[SampleRef], specs: Sequence[InputSpec]) -> list[Feeds]:
    out: list[Feeds] = []
    for ref in refs:
        path = sample_path(ds, ref)
        if path.suffix.lower() == ".npz":
            try:
                out.extend(load_npz(path, tuple(specs), max_bytes=SAMPLE_MEMORY_BYTES))
            except StudioError as exc:
                raise _sample_error(ds, ref, str(exc)) from None
        else:
            if len(specs) != 1:
                raise _sample_error(ds, ref, f"a .npy sample feeds one input; the model has {len(specs)}")
            out.append({specs[0].name: _fit_shape(ds, ref, specs[0], _read_npy_sample(ds, ref, path, specs[0]))})
    return out


def _read_npy_sample(ds: Dataset, ref: SampleRef, path: Path, spec: InputSpec) -> np.ndarray:
    """A .npy sample read header first: numeric, within the sample budget and the file, and of a
    shape and type the input takes, before anything is allocated (never unpickled)."""
    def fits(header) -> None:  # noqa: ANN001 - tensor_safety.ArrayHeader
        check_array_header(spec, header.shape, header.dtype, "the sample gives", batch_axis_optional=True)

    try:
        return load_npy(path, label="the file", max_bytes=SAMPLE_MEMORY_BYTES, check=fits)
    except StudioError as exc:
        raise _sample_error(ds, ref, str(exc)) from None
