"""ONNX Runtime's symbolic shape inference, without its write into the current folder.

``SymbolicShapeInference.infer_shapes`` saves ``sym_shape_infer_temp.onnx`` (and each weight as a
``<uuid>.data`` file) into the *current folder* before raising "Incomplete symbolic shape inference":
run from the CLI, that is the user's folder (found by the suite's sandbox check). The library's own
steps are run here instead, and an incomplete result is returned as it stands (the callers take only
the shapes it did find). Written by hand because the library has no option to skip the save.
"""

from __future__ import annotations

import logging

from onnx import ModelProto

log = logging.getLogger(__name__)


def symbolic_shapes(model: ModelProto, *, auto_merge: bool = True, guess_output_rank: bool = False,
                    int_max: int = 2**31 - 1) -> ModelProto | None:
    """``model`` with the value shapes ORT's symbolic inference found (``None`` where it cannot run).
    ``model`` is not modified; nothing is written anywhere."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference, get_opset

        logging.getLogger("onnxruntime.tools.symbolic_shape_infer").setLevel(logging.CRITICAL)
        opset = get_opset(model)
        if not opset or opset < 7:
            return None
        sym = SymbolicShapeInference(int_max, auto_merge, guess_output_rank, 0)
        sym._preprocess(model)                 # the steps of infer_shapes, less its save
        while sym.run_:
            sym._infer_impl()
        sym._update_output_from_vi()
        return sym.out_mp_
    except Exception as exc:  # noqa: BLE001 - an optional second opinion: its failure leaves ONNX's shapes
        log.info("symbolic shape inference failed: %s", str(exc)[:200])
        return None
