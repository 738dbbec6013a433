"""Load an ONNX model from a path or from uploaded bytes, safely and lazily.

``load`` never reads external weights into memory (they stay on disk for the
engines, which read them by path), never modifies the input file, and turns
every way a file can be wrong into a one-line ``ModelLoadError``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import ModelProto, TensorProto

from studio.core.error_codes import ErrorCode
from studio.core.errors import ModelLoadError, StudioError
from studio.core.expansion import check_expansion
from studio.core.paths import check_regular_file
from studio.core.sniff import sniff_bytes, zip_member_names
from studio.core.protowalk import iter_tensors
from studio.core.tensor_safety import TensorScan, check_location, validate_tensors
from studio.core.utf8check import first_invalid_text
from studio.core.outputs import register_input

log = logging.getLogger(__name__)

PROTOBUF_LIMIT = 2**31 - 1        # a single serialized ModelProto cannot exceed 2 GiB
HEAD_BYTES = 64 * 1024
_HASH_CHUNK = 8 * 2**20
# An .onnx file above this holds its weights inline (exporters store every tensor over 1 KiB externally,
# so a model with external data is a small file): it is counted alone, so a size count never parses a
# GiB-sized protobuf (its weights) in the calling process.
_PARSE_AT_MOST = 256 * 2**20

# Highest versions the installed onnx package understands.
MAX_IR_VERSION = onnx.IR_VERSION
_MAX_OPSET = {
    "": onnx.defs.onnx_opset_version(),
    "ai.onnx": onnx.defs.onnx_opset_version(),
}
try:
    _MAX_OPSET["ai.onnx.ml"] = max(s.since_version for s in onnx.defs.get_all_schemas_with_history()
                                   if s.domain == "ai.onnx.ml")
except Exception:  # pragma: no cover - only with an unusual onnx build
    pass
_MAX_OPSET["ai.onnx.ml"] = max(_MAX_OPSET.get("ai.onnx.ml", 5), 5)
_MAX_OPSET["ai.onnx.training"] = 1
_MAX_OPSET["ai.onnx.preview.training"] = 1


@dataclass(frozen=True)
class CheckResult:
    """Outcome of ``onnx.checker`` on the model (basic structure)."""

    ok: bool
    message: str | None = None


@dataclass(frozen=True)
class ModelHandle:
    """A loaded model. ``proto`` holds the graph without external weights.

    Treat ``proto`` as read-only: passes clone it before changing anything.
    """

    path: Path
    name: str
    sha256: str
    file_bytes: int
    proto: ModelProto = field(repr=False, compare=False)
    scan: TensorScan = field(repr=False, compare=False)
    check: CheckResult = CheckResult(True)

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def external_files(self) -> tuple[Path, ...]:
        return tuple(sorted({r.file for r in self.scan.external}))

    @property
    def total_bytes(self) -> int:
        return self.file_bytes + sum(f.stat().st_size for f in self.external_files)

    @property
    def short_sha(self) -> str:
        return self.sha256[:8]


def sha256_file(path: str | Path) -> str:
    """sha256 of one file's bytes, read in chunks (the one file hash: exports, datasets, returned models)."""
    return sha256_files([Path(path)])


def model_weight_bytes(path: str | Path, data_dir: str | Path | None = None) -> int:
    """The bytes of weights a job that loads the model at ``path`` holds, from file sizes and the graph
    alone (no weight is read): the file itself, plus for ONNX the external-data ranges its tensors declare
    (``offset``/``length`` as declared; no length: to the end of the file; each file's ranges merged, so a
    file shared by many tensors, or a range named twice, counts once), plus for an OpenVINO IR ``.xml``
    its ``.bin``. Only files the model references inside its folder (``data_dir``: where a pipeline
    checkpoint's weights live) pass :func:`check_location`; others are not counted (the loader refuses
    them). 0 when ``path`` cannot be read. The one weight count of the studio (worker memory limits, the
    mapped-pages threshold, layer-wise chunk size, export's external-data decision): counting every
    weight file of the folder counted the other models' weights beside it too."""
    path = Path(path)
    try:
        st = path.stat()
        if path.suffix == ".xml":
            weights = path.with_suffix(".bin")
            return st.st_size + (weights.stat().st_size if weights.is_file() else 0)
    except OSError:
        return 0                        # unreadable here: the job that opens it names the problem
    if st.st_size > _PARSE_AT_MOST:
        return st.st_size
    root = Path(data_dir) if data_dir is not None else path.parent
    ranges: dict[Path, list[tuple[int, int | None]]] = {}
    for location, offset, length in _declared_external(str(path.resolve()), st.st_size, st.st_mtime_ns):
        try:
            target = check_location(location, root, location, hard_link_ok=True)
        except (StudioError, OSError):
            continue
        ranges.setdefault(target, []).append((offset, length))
    total = st.st_size
    for target, spans in ranges.items():
        try:
            size = target.stat().st_size
        except OSError:
            continue
        total += _covered(spans, size)
    return total


def _covered(spans: list[tuple[int, int | None]], size: int) -> int:
    """Bytes covered by the declared (offset, length) spans of a ``size``-byte file; no length: to its end."""
    covered, end = 0, 0
    for start, stop in sorted((o, size if n is None else o + n) for o, n in spans):
        start = max(start, end)
        if stop > start:
            covered += stop - start
            end = stop
    return covered


@functools.lru_cache(maxsize=64)
def _declared_external(path: str, size: int, mtime_ns: int) -> tuple[tuple[str, int, int | None], ...]:
    """(location, offset, length) of every external tensor of the ONNX file at ``path`` (every graph,
    subgraph and function; ``size``/``mtime_ns`` key the cache), read without its weights; () where it is
    not an ONNX graph (the job that opens it names the problem)."""
    del size, mtime_ns
    try:
        proto = onnx.load_model(path, load_external_data=False)
    except Exception:  # noqa: BLE001 - not an ONNX graph (or unreadable): nothing declared
        return ()
    out = []
    for t, _ in iter_tensors(proto):
        if t.data_location != TensorProto.EXTERNAL and not len(t.external_data):
            continue
        entries = {e.key: e.value for e in t.external_data}
        offset = entries.get("offset", "0")
        length = entries.get("length")
        if not offset.isdigit() or (length is not None and not length.isdigit()):
            continue                    # malformed: tensor_safety refuses the model before any engine
        out.append((entries.get("location", ""), int(offset), None if length is None else int(length)))
    return tuple(out)


def sha256_files(paths: list[Path]) -> str:
    """sha256 over the model file and its external-data files (name + content)."""
    h = hashlib.sha256()
    for i, p in enumerate(paths):
        if i:
            h.update(b"\0" + p.name.encode() + b"\0")
        with open(p, "rb") as fh:
            while chunk := fh.read(_HASH_CHUNK):
                h.update(chunk)
    return h.hexdigest()


def _check_versions(model: ModelProto) -> None:
    if model.ir_version <= 0:
        raise ModelLoadError("not an ONNX model: no IR version (is this really a .onnx file?)")
    if model.ir_version > MAX_IR_VERSION:
        raise ModelLoadError(f"unsupported IR version {model.ir_version}: this studio understands up to "
                             f"{MAX_IR_VERSION}; re-export with an older exporter setting")
    if not model.opset_import and model.ir_version >= 3:
        raise ModelLoadError("model declares no opset_import: re-export it, or add the ai.onnx opset")
    for op in model.opset_import:
        limit = _MAX_OPSET.get(op.domain)
        if limit is not None and op.version > limit:
            dom = op.domain or "ai.onnx"
            raise ModelLoadError(f"unsupported opset {dom} {op.version}: this studio understands up to {limit}")
        if op.version < 1 and op.domain in ("", "ai.onnx"):
            raise ModelLoadError(f"unsupported opset ai.onnx {op.version}")


def _scrub(message: str, folder: Path) -> str:
    text = message.replace(str(folder.resolve()), "<model folder>").replace(str(folder), "<model folder>")
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "checker failed")
    return first[:400]


def _basic_check(path: Path) -> CheckResult:
    """Structural check. By path, so external files resolve next to the model (the
    checker resolves a proto's locations against the process cwd); the locations
    were validated before this runs."""
    try:
        onnx.checker.check_model(str(path), full_check=False)
    except onnx.checker.ValidationError as exc:
        return CheckResult(False, _scrub(str(exc), path.parent))
    except Exception as exc:  # the checker can raise other C++ errors
        return CheckResult(False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
    return CheckResult(True)


def parse_model_file(path: Path) -> ModelProto:
    """Sniff and parse ``path`` without external data; raise ModelLoadError when it is not ONNX."""
    st = check_regular_file(path, max_bytes=None, label="model file")
    size = st.st_size
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
    sniffed = sniff_bytes(head, total_size=size,
                          zip_names=zip_member_names(path) if head[:2] == b"PK" else None)
    if sniffed.message:
        raise ModelLoadError(sniffed.message)
    if size > PROTOBUF_LIMIT:
        raise ModelLoadError(f"single-file model is {size / 2**30:.1f} GiB: ONNX files > 2 GiB must use "
                             "external data (save with save_as_external_data=True)")
    try:
        model = onnx.load_model(str(path), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ModelLoadError(f"not an ONNX model, or a truncated/corrupt one: protobuf parsing failed "
                             f"({type(exc).__name__}); re-download or re-export the model") from None
    if not model.HasField("graph"):
        raise ModelLoadError("not an ONNX model, or a truncated one: the file has no graph")
    where = first_invalid_text(model)
    if where is not None:
        raise ModelLoadError(f"the model's text is not valid UTF-8 (at {where.removeprefix('model.')}); names, "
                             "doc strings and metadata must be UTF-8: re-export the model or fix that field")
    return model


def load(path: str | Path, *, check: bool = True) -> ModelHandle:
    """Load and validate a model file. Raises ModelLoadError with a one-line reason."""
    p = Path(path).absolute()      # absolute: sandbox workers run in their own folder
    model = parse_model_file(p)
    _check_versions(model)
    check_expansion(model)
    scan = validate_tensors(model, p.parent)
    files = [p, *sorted({r.file for r in scan.external})]
    try:
        digest = sha256_files(files)
    except OSError as exc:
        raise ModelLoadError(f"cannot read model files ({exc.strerror})") from None

    register_input(*files)          # no output of this process may replace the model or its weights
    result = _basic_check(p) if check else CheckResult(True)
    if not result.ok:
        log.info("checker: %s", result.message)
    return ModelHandle(path=p, name=p.stem or "model", sha256=digest, file_bytes=p.stat().st_size,
                       proto=model, scan=scan, check=result)


def require_valid(handle: ModelHandle, action: str) -> None:
    """Refuse an action (optimize, export...) on a model that fails the checker."""
    if not handle.check.ok:
        raise StudioError(f"cannot {action}: the model fails onnx.checker ({handle.check.message}); "
                          "fix the model first", code=ErrorCode.INVALID_MODEL)
