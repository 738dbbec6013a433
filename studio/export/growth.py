"""The one rule, for every export target, on an artifact far larger than the model it came from.

Engines store what they compute from constants as weights: ONNX Runtime's optimized save at every
``--ort-level`` (its constant folding runs at ``basic``), OpenVINO's converter, onnx2tf, pnnx. A model
whose weights are *generated* (``ConstantOfShape``/``Expand``/``Tile`` of small shapes: the ONNX backend's
"light" models, masks and position tables built in the graph) then ships as the full tensors: onnx's
``light_inception_v2`` (159 KB) became a 40 MiB ``model.onnx``. The artifact is still correct, so its
verification passes; the size is what a deployment notices. :func:`growth_note` says it in one line:
the ratio, the largest initializers the artifact holds that the source did not (and the op that
generated each, from the source), and what to do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

import onnx

from studio.core.fmt import human_bytes
from studio.core.protowalk import iter_graphs
from studio.core.tensor_safety import packed_nbytes
from studio.export.results import Artifact, TargetResult

# An artifact (its file and companions) this many times its source, and this much larger, gets the note.
GROWTH_RATIO = 4.0
GROWTH_MIN_BYTES = 10 * 2**20
_NAMED = 2             # initializers named in the note
# Words in the kinds of artifacts that are not models (libraries, configs, scripts: no folding in them).
_NOT_MODELS = ("options", "config", "custom-ops", "extension", "plugin", "script", "trtexec", "placeholder", "error")

# What to do, per target (the default for any other): where each engine lets the user keep the small model.
_ADVICE = {
    "onnxruntime": "ONNX Runtime folds at every --ort-level: if size matters, ship the source .onnx and let ONNX "
                   "Runtime optimize it at load",
    "triton": "if size matters, serve the source .onnx and let the backend optimize it at load",
    "openvino": "if size matters, ship the source .onnx (OpenVINO reads ONNX) and convert at load",
}
_DEFAULT_ADVICE = "if size matters, ship the source .onnx where the engine reads ONNX"


def artifact_bytes(bundle: Path, artifact: Artifact) -> int:
    """The artifact's file and its companions (``model.onnx.data``, ``model.bin``), in bytes."""
    total = int(artifact.bytes)
    for rel in artifact.companions:
        p = Path(bundle) / rel
        total += p.stat().st_size if p.is_file() else 0
    return total


def stored_bytes(t: onnx.TensorProto) -> int:
    """Bytes a TensorProto holds: external ``length``, raw_data, else typed fields (from its dims)."""
    if t.data_location == onnx.TensorProto.EXTERNAL:
        for e in t.external_data:
            if e.key == "length" and e.value.isdigit():
                return int(e.value)
    if t.raw_data:
        return len(t.raw_data)
    n = 1
    for d in t.dims:
        n *= max(int(d), 0)
    return packed_nbytes(t.data_type, n) or 0


def _source_facts(source: onnx.ModelProto) -> tuple[dict[str, int], dict[str, str]]:
    """The source's initializer sizes and, for every node output, the op that makes it (subgraphs too)."""
    sizes: dict[str, int] = {}
    producers: dict[str, str] = {}
    for ref in iter_graphs(source):
        for t in ref.graph.initializer:
            sizes[t.name] = stored_bytes(t)
        for n in ref.graph.node:
            producers.update((o, n.op_type) for o in n.output if o)
    return sizes, producers


def created_initializers(artifact: Path, source: onnx.ModelProto) -> list[tuple[str, int, str | None]]:
    """The ONNX ``artifact``'s initializers the source did not hold (or held smaller), largest first:
    (name, bytes, the source op that produced that value, if any)."""
    model = onnx.load_model(str(artifact), load_external_data=False)
    sizes, producers = _source_facts(source)
    out = []
    for t in model.graph.initializer:
        size = stored_bytes(t)
        if t.name not in sizes or size > sizes[t.name]:
            out.append((t.name, size, producers.get(t.name)))
    return sorted(out, key=lambda x: -x[1])


def growth_note(target: str, bundle: Path, artifacts: Iterable[Artifact], source_bytes: int,
                source: onnx.ModelProto | None = None) -> str | None:
    """One line when the target's largest model artifact is more than :data:`GROWTH_RATIO` times the source
    and :data:`GROWTH_MIN_BYTES` larger: its size and ratio, the largest initializers it created (ONNX
    artifacts: by name, size and the op that generated them in the source) and what to do; else None."""
    models = [a for a in artifacts if not any(w in a.kind for w in _NOT_MODELS)]
    if not models or source_bytes <= 0:
        return None
    biggest = max(models, key=lambda a: artifact_bytes(bundle, a))
    size = artifact_bytes(bundle, biggest)
    if size <= GROWTH_RATIO * source_bytes or size - source_bytes <= GROWTH_MIN_BYTES:
        return None
    cause = "constants computed at export stored as weights"
    # the names come from an ONNX file of the target (the .ort or an IR holds the same weights)
    onnx_files = [a for a in models if a.path.endswith(".onnx")]
    path = Path(bundle) / max(onnx_files, key=lambda a: artifact_bytes(bundle, a)).path if onnx_files else None
    if source is not None and path is not None and path.is_file():
        try:
            created = created_initializers(path, source)
        except Exception:  # noqa: BLE001 - the note still says the size without the names
            created = []
        if created:
            ops = sorted({op for _, _, op in created if op})
            named = ", ".join(f"{n[:32]} {human_bytes(b)}" for n, b, _ in created[:_NAMED])
            made = f" (it computes them with {'/'.join(ops[:3])})" if ops else ""
            total = human_bytes(sum(b for _, b, _ in created))
            cause = (f"{len(created)} initializer(s) the source does not hold{made}: constants folded into "
                     f"weights ({total}; largest: {named})")
    advice = _ADVICE.get(target, _DEFAULT_ADVICE)
    return (f"{biggest.path} is {human_bytes(size)}, {size / source_bytes:.0f}x the {human_bytes(source_bytes)} "
            f"source: {cause}; {advice}")


def with_growth_note(result: TargetResult, bundle: Path, source_bytes: int,
                     source: onnx.ModelProto | None = None) -> TargetResult:
    """``result`` with :func:`growth_note`'s line added to its notes (unchanged when there is none)."""
    note = growth_note(result.target, bundle, result.artifacts, source_bytes, source)
    return result if note is None else dataclasses.replace(result, notes=(*result.notes, note))


__all__ = ["GROWTH_MIN_BYTES", "GROWTH_RATIO", "created_initializers", "growth_note", "with_growth_note"]
