"""convert-opset: the model's ai.onnx opset  ⇒  ``target`` (option), op by op.

Wraps onnxscript's ``ConvertVersionPass`` (its own adapters from opset 18 up,
``onnx.version_converter`` below that, with large weights kept out of the C
API call). That pass silently does nothing when the conversion fails; here a
failure is an error naming the versions. Runs in a sandbox worker: the C
converter can crash on unusual models.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, label_diff, labels, result
from passes.ir_helpers import opset_version
from passes.base import register
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError


@register
class ConvertOpset(StudioPass):
    """ai.onnx opset N  ⇒  opset ``target`` (every node adapted by the ONNX version converters)."""

    name = "convert-opset"
    summary = "Convert the model to another ai.onnx opset (option target=N), e.g. 17 for LayerNormalization."
    calls_engines = True

    def call(self, model: ir.Model) -> PassResult:
        target = self.options.get("target")
        if target is None:
            raise StudioError("convert-opset needs a target opset (option target=N, e.g. --set convert-opset.target=17)",
                              code=ErrorCode.BAD_OPTION)
        target = int(target)
        latest = onnx.defs.onnx_opset_version()
        if not 7 <= target <= latest:
            raise StudioError(f"convert-opset: target {target} is outside 7..{latest}", code=ErrorCode.BAD_OPTION)
        current = opset_version(model)
        if current == target:
            return result(model, [])
        from onnxscript.version_converter import ConvertVersionPass

        before = labels(model)
        converted = ConvertVersionPass(target_version=target, fallback=True)(model).model
        got = opset_version(converted)
        if got != target:
            raise StudioError(f"convert-opset: the ONNX version converters could not convert opset {current} to "
                              f"{target}; the model is unchanged", code=ErrorCode.CONVERT_FAILED)
        changes = [Change("changed", (), f"ai.onnx opset {current} -> {target}")]
        min_ir = onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", target)])
        if converted.ir_version < min_ir:    # opset N needs IR >= M; an old IR with a new opset fails the checker
            changes.append(Change("changed", (), f"IR version {converted.ir_version} -> {min_ir}"))
            converted.ir_version = min_ir
        changes += label_diff(before, converted, f"adapted for opset {target}")
        return PassResult(converted, True, tuple(changes), {"opset_from": current, "opset_to": target})
