"""fuse-transformers: decomposed attention / LayerNorm / GELU / embeddings  ⇒  ORT's fused contrib ops.

``onnxruntime.transformers.optimizer.optimize_model`` (``passes.transformer_fusion``) as one
verified pass: Attention, SkipLayerNormalization, BiasGelu, EmbedLayerNormalization, FastGelu...
for bert/gpt2/llama/vit-style graphs, the model type read from the graph or given. It runs in a
sandbox worker (ORT's optimizer is native code working on the user's model), and the pipeline
verifies its result on ONNX Runtime like any pass. The fused ops live in the com.microsoft
domain: the result runs on ONNX Runtime only, which the pass says.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, labels
from passes.base import register
from passes.transformer_fusion import fuse_file, names_of
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from passes import quant_tools as qt
from studio.core.model_io import save_result


@register
class FuseTransformers(StudioPass):
    """Attention/LayerNorm/GELU/embedding subgraphs  ⇒  ONNX Runtime's fused transformer ops."""

    name = "fuse-transformers"
    summary = ("ONNX Runtime's transformer fusions (Attention, SkipLayerNormalization, BiasGelu, "
               "EmbedLayerNormalization, FastGelu...) for bert/gpt2/llama/vit-style graphs; ORT-only result.")
    calls_engines = True

    # Options: model_type ("auto" | an ORT model type), num_heads / hidden_size (0: detect),
    # disable / enable (FusionOptions switches, passes.transformer_fusion.SWITCHES; the tanh GELU
    # approximation is off unless enabled).
    def call(self, model: ir.Model) -> PassResult:
        with tempfile.TemporaryDirectory(prefix="fuse-tr-", dir=".") as tmp:
            return _run(model, Path(tmp).resolve(), self.options)


def _run(model: ir.Model, workdir: Path, opts: dict) -> PassResult:
    src = save_result(model, workdir / "src" / "model.onnx")
    try:
        fusion = fuse_file(src, workdir / "fused" / "model.onnx", model_type=str(opts.get("model_type", "auto")),
                           num_heads=int(opts.get("num_heads", 0)), hidden_size=int(opts.get("hidden_size", 0)),
                           disable=names_of(opts.get("disable")), enable=names_of(opts.get("enable")))
    except StudioError:
        raise
    except Exception as exc:  # noqa: BLE001 - ORT's optimizer on an unusual graph: a clear error, not a traceback
        first = (str(exc).splitlines() or [""])[0][:200]
        raise StudioError(f"onnxruntime's transformer optimizer failed on this model ({type(exc).__name__}: "
                          f"{first}); try --set fuse-transformers.model_type=... or disable a fusion",
                          code=ErrorCode.FUSION_FAILED) from None
    qt.release_memory()                 # the optimizer's copies of the weights are gone: hand the pages back
    details = fusion.to_dict()
    if fusion.path is None:
        return PassResult(model, False, (), {}, (fusion.note,), details=details)
    before = labels(model)
    result = qt.load_result(fusion.path)
    after = labels(result)
    removed = tuple(k for k in before if k not in after)
    added = tuple(k for k in after if k not in before)
    text = ", ".join(f"{n} {op}" for op, n in sorted(fusion.fused.items()))
    changes = [Change("fused", removed, f"ORT {fusion.model_type} fusions: {text}")]
    if added:
        changes.append(Change("added", added, "fused ops (com.microsoft)"))
    counts = {f"fused_{op}": n for op, n in fusion.fused.items()}
    counts.update(nodes_removed=len(removed), nodes_added=len(added))
    warnings = ("the fused ops are com.microsoft contrib ops: this model now runs on ONNX Runtime only",)
    notes = (fusion.note,) if fusion.note else ()
    return PassResult(result, True, tuple(changes), counts, notes, warnings=warnings, details=details)
