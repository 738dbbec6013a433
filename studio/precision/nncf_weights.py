"""Weight-only int4/int8 for OpenVINO the OpenVINO way: NNCF ``compress_weights``.

NNCF compresses the weights of an OpenVINO model (read from the ONNX file) without
data: INT4_SYM / INT4_ASYM in groups of ``group_size`` values with ``ratio`` of the
ratio-defining layers in int4 (the rest, and by NNCF's default the embeddings and the
last layer, stay INT8_ASYM per channel), or INT8_SYM / INT8_ASYM per channel for every
layer. Activations stay float; OpenVINO decompresses on the fly. Native code on the
user's model: it runs in a sandbox worker (telemetry off, as for NNCF INT8). The
result is an OpenVINO IR (xml + bin) in the job's output folder, with the count of
compressed weight constants by element type read back from the saved IR.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from studio.core import outputs
from studio.core.engines.openvino_io import read_onnx_model
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, WorkerError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.model import model_weight_bytes
from studio.core.sandbox import Limits, run_job, scaled_to_model

__all__ = ["MODES", "CompressedIR", "compress_openvino", "compressed_constants"]

MODES = ("INT4_SYM", "INT4_ASYM", "INT8_SYM", "INT8_ASYM")
_LOW_BIT = ("i4", "u4", "i8", "u8")


@dataclass(frozen=True)
class CompressedIR:
    """An NNCF weight-compressed OpenVINO IR and what it holds."""

    mode: str
    group_size: int | None
    ratio: float
    ir_path: Path
    seconds: float
    constants: dict[str, int]        # compressed weight constants by element type (i4/u4/i8/u8)
    nncf_version: str
    openvino_version: str

    def to_dict(self) -> dict:
        return {"mode": self.mode, "group_size": self.group_size, "ratio": self.ratio, "ir": self.ir_path.name,
                "seconds": round(self.seconds, 3), "compressed_constants": dict(self.constants),
                "nncf_version": self.nncf_version}


def compressed_constants(model) -> dict[str, int]:
    """Constants of an OpenVINO model by low-bit element type ("i4": 21, "u8": 4): the compressed weights
    (a float model has none)."""
    counts: Counter = Counter()
    for op in model.get_ops():
        if op.get_type_name() == "Constant":
            et = op.get_element_type().get_type_name()
            if et in _LOW_BIT:
                counts[et] += 1
    return dict(counts)


@job("precision.nncf-weights")
def nncf_weights_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    os.environ["NNCF_CI"] = "1"            # no telemetry from a worker
    import nncf
    import openvino as ov

    core = ov.Core()
    ctx.set_stage("OpenVINO read for NNCF weight compression")
    # an ONNX file through the ONNX frontend only, like every OpenVINO read (no input shapes here: a tensor of
    # unknown rank keeps the advice to fix them)
    path = args["model_path"]
    model = read_onnx_model(path) if Path(path).suffix.lower() == ".onnx" else core.read_model(path)
    mode = getattr(nncf.CompressWeightsMode, args["mode"])
    kwargs = {}
    if args["mode"].startswith("INT4"):
        kwargs = {"group_size": int(args["group_size"]), "ratio": float(args["ratio"])}
    ctx.set_stage(f"NNCF compress_weights ({args['mode']})")
    started = time.perf_counter()
    compressed = nncf.compress_weights(model, mode=mode, **kwargs)
    seconds = time.perf_counter() - started
    xml = ctx.out_dir / f"model_{args['mode'].lower()}.xml"
    ov.save_model(compressed, str(xml), compress_to_fp16=False)  # scratch: the worker's job folder
    counts = compressed_constants(core.read_model(str(xml)))
    return JobOutput(data={"ir": xml.name, "seconds": seconds, "constants": counts,
                           "nncf_version": nncf.__version__, "openvino_version": ov.get_version()})


def compress_openvino(model_path: Path, out_dir: Path, *, mode: str = "INT4_SYM", group_size: int = 128,
                      ratio: float = 1.0, limits: Limits | None = None, pool_key: str = "default") -> CompressedIR:
    """Compress ``model_path``'s weights with NNCF for OpenVINO; the IR lands in ``out_dir``.
    ``group_size`` and ``ratio`` apply to the INT4 modes (INT8 is per channel, every layer)."""
    if mode not in MODES:
        raise StudioError(f"NNCF weight compression mode must be one of {', '.join(MODES)}, got {mode[:20]!r}",
                          code=ErrorCode.BAD_OPTION)
    if not 0.0 < ratio <= 1.0:
        raise StudioError(f"ratio (the share of layers in int4) must be in (0, 1], got {ratio}",
                          code=ErrorCode.BAD_OPTION)
    if mode.startswith("INT4") and (group_size < 1 and group_size != -1):
        raise StudioError(f"group size must be positive (or -1: per channel), got {group_size}",
                          code=ErrorCode.BAD_OPTION)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="studio-nncf-w-"))
    base = scaled_to_model(limits, model_weight_bytes(model_path))   # NNCF holds a few copies of the weights
    limits = Limits(timeout_s=max(base.timeout_s, 600.0), memory_bytes=base.memory_bytes,
                    cpu_threads=base.cpu_threads, address_space_limit=base.address_space_limit)
    try:
        res = run_job("precision.nncf-weights", {"model_path": str(Path(model_path).resolve()), "mode": mode,
                                                 "group_size": group_size, "ratio": ratio},
                      stage=f"NNCF weight compression ({mode})", limits=limits, out_dir=work / "out",
                      pool_key=pool_key, fresh=True)
        xml = work / "out" / res.data["ir"]
        for f in (xml, xml.with_suffix(".bin")):
            outputs.copy_file(f, out_dir / f.name)
    except WorkerError as exc:
        raise StudioError(f"NNCF weight compression failed: {exc}", code=ErrorCode.NNCF_FAILED) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)  # scratch: our temp folder
    d = res.data
    return CompressedIR(mode, group_size if mode.startswith("INT4") else None, ratio, out_dir / d["ir"],
                        float(d["seconds"]), dict(d["constants"]), d["nncf_version"], d["openvino_version"])
