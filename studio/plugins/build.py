"""Compile a generated C++ package with CMake and check the library against the reference.

The build runs ``cmake`` as a subprocess inside the package folder (``build/``), with a time limit; the
library is then loaded in a one-off, confined worker (``register_custom_ops_library`` for ONNX Runtime,
``core.add_extension`` for OpenVINO -- native code can crash, and a loaded library must not stay in a shared
worker), every captured sample runs through a one-node model, and the whole model runs with the library.
TensorRT packages are never built here: TensorRT is not installable on this machine.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from studio.core.errors import StudioError, WorkerError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.model import ModelHandle
from studio.core.sandbox import Limits, default_limits, run_job, scrub_message
from studio.plugins import toolchain
from studio.plugins.opgraph import find_nodes, single_node_model
from studio.plugins.runner import OpRunResult, _job_args, _result
from studio.plugins.signature import OpSignature
from studio.plugins.usercode import short_error

__all__ = ["BUILDABLE", "BuildResult", "build_package", "native_check_job"]

BUILDABLE = ("ort-cpp", "openvino-cpp")
BUILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class BuildResult:
    target: str
    built: bool
    message: str                            # one line
    library: str | None = None              # relative to the package folder
    seconds: float = 0.0
    log_tail: str = ""                      # last lines of the compiler output (paths scrubbed)
    check: OpRunResult | None = None        # the library run against the reference
    toolchain: dict = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.built and self.check is not None and bool(self.check)

    def to_dict(self) -> dict:
        return {"target": self.target, "built": self.built, "ok": bool(self), "message": self.message,
                "library": self.library, "seconds": round(self.seconds, 2), "log_tail": self.log_tail,
                "check": None if self.check is None else self.check.to_dict(), "toolchain": self.toolchain}


def _run(cmd: list[str], cwd: Path, timeout: float) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s"
    return proc.returncode, (proc.stdout + proc.stderr)


def _tail(text: str, folder: Path, lines: int = 25) -> str:
    keep = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return "\n".join(scrub_message(ln, (folder,)) for ln in keep)


def build_package(package_dir: Path, target: str, *, timeout_s: float = BUILD_TIMEOUT_S, jobs: int = 2) -> BuildResult:
    """``cmake`` configure + build of one generated package; the library lands in ``package_dir/build``."""
    package_dir = Path(package_dir)
    if target == "tensorrt":
        return BuildResult(target, False, "not compiled here: TensorRT is not installable on this machine (it needs "
                           "CUDA, an NVIDIA GPU and NVIDIA's packages); build it where TensorRT is installed")
    if target not in BUILDABLE:
        raise StudioError(f"only {', '.join(BUILDABLE)} packages are built (got {target})", code="BAD-TARGET")
    if not (package_dir / "CMakeLists.txt").is_file():
        raise StudioError(f"no CMakeLists.txt in the {target} package; generate it first", code="BAD-PATH")
    tools = [toolchain.cmake(), toolchain.cxx_compiler()]
    dev = toolchain.ort_include_dir() if target == "ort-cpp" else toolchain.openvino_cmake_dir()
    missing = [t.reason for t in (*tools, dev) if not t.ok]
    info = {"cmake": tools[0].path, "cxx": tools[1].path, "dev_files": dev.path}
    if missing:
        return BuildResult(target, False, f"cannot build: {missing[0]}", toolchain=info)
    define = f"-DORT_INCLUDE_DIR={dev.path}" if target == "ort-cpp" else f"-DOpenVINO_DIR={dev.path}"
    started = time.perf_counter()
    build = package_dir / "build"
    code, log = _run([tools[0].path or "cmake", "-S", ".", "-B", "build", define, "-DCMAKE_BUILD_TYPE=Release",
                      f"-DCMAKE_CXX_COMPILER={tools[1].path}"], package_dir, timeout_s)
    if code == 0:
        remaining = max(30.0, timeout_s - (time.perf_counter() - started))
        code, more = _run([tools[0].path or "cmake", "--build", "build", "-j", str(max(1, jobs))], package_dir,
                          remaining)
        log += more
    seconds = time.perf_counter() - started
    libs = sorted(build.glob("lib*.so")) if build.is_dir() else []
    if code != 0 or not libs:
        first_error = next((ln for ln in log.splitlines() if "error" in ln.lower()), "see the log")
        return BuildResult(target, False, f"build failed: {scrub_message(first_error, (package_dir,))[:300]}",
                           seconds=seconds, log_tail=_tail(log, package_dir), toolchain=info)
    return BuildResult(target, True, f"built {libs[0].name} in {seconds:.1f} s", str(libs[0].relative_to(package_dir)),
                       seconds, _tail(log, package_dir, 5), toolchain=info)


def check_library(handle: ModelHandle, sig: OpSignature, target: str, library: Path, *, run_model: bool = True,
                  pool_key: str = "default", timeout_s: float | None = None,
                  on_tick: Callable[[float], None] | None = None) -> OpRunResult:
    """Load the built library in a one-off, confined worker; run the samples (and the model) against the reference."""
    args, arrays = _job_args(sig, handle)
    args.update(target=target, library=str(Path(library).resolve()),
                run_model=bool(run_model and sig.model_outputs is not None))
    base = default_limits()
    limits = Limits(timeout_s=float(timeout_s or base.timeout_s), memory_bytes=base.memory_bytes,
                    cpu_threads=base.cpu_threads, minimal_env=True)
    label = f"{'ONNX Runtime library' if target == 'ort-cpp' else 'OpenVINO extension'} for `{sig.op_type}`"
    started = time.perf_counter()
    try:
        res = run_job("plugins.native_check", args, arrays, stage=label, limits=limits, fresh=True,
                      pool_key=pool_key, on_tick=on_tick)
    except WorkerError as exc:
        from studio.plugins.runner import _worker_message

        return OpRunResult(sig.qualified, target, "error", _worker_message(exc, label, limits),
                           seconds=time.perf_counter() - started, reference=sig.reference)
    return _result(sig, target, res.data, res.arrays, time.perf_counter() - started)


# ---------------------------------------------------------------------------- worker side

def _ort_runner(library: str, threads: int | None) -> Callable[[onnx.ModelProto | str, list[np.ndarray]], list]:
    import onnxruntime as ort

    def run(model: onnx.ModelProto | str, feeds: list[np.ndarray]) -> list[np.ndarray]:
        so = ort.SessionOptions()
        so.register_custom_ops_library(library)
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        if threads:
            so.intra_op_num_threads = int(threads)
        src = model if isinstance(model, str) else model.SerializeToString()
        session = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return [np.asarray(v) for v in session.run(None, dict(zip(names, feeds)))]
    return run


def _ov_runner(library: str, threads: int | None, scratch: Path) -> Callable[[onnx.ModelProto | str, list], list]:
    import openvino as ov

    core = ov.Core()
    core.add_extension(library)
    config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    counter = [0]

    def run(model: onnx.ModelProto | str, feeds: list[np.ndarray]) -> list[np.ndarray]:
        if isinstance(model, str):
            path = model
        else:
            counter[0] += 1
            path = str(scratch / f"one_{counter[0]}.onnx")
            onnx.save_model(model, path)  # scratch: worker: the build's scratch folder
        compiled = core.compile_model(core.read_model(path), "CPU", config)
        request = compiled.create_infer_request()
        request.infer({i: a for i, a in enumerate(feeds)})
        values = [np.array(request.get_output_tensor(i).data, copy=True) for i in range(len(compiled.outputs))]
        # OpenVINO's output order need not be the ONNX graph's: map back through the tensor names.
        names = [o.name for o in onnx.load_model(path, load_external_data=False).graph.output]
        by_name = {n: i for i, port in enumerate(compiled.outputs) for n in port.get_names()}
        if len(names) == len(values) and all(n in by_name for n in names):
            values = [values[by_name[n]] for n in names]
        return values
    return run


@job("plugins.native_check")
def native_check_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    import sys

    from studio.plugins.confine import confine_writes

    target, library = str(args["target"]), str(args["library"])
    domain, op_type = str(args["domain"]), str(args["op_type"])
    label = f"{'ONNX Runtime library' if target == 'ort-cpp' else 'OpenVINO extension'} for `{op_type}`"
    if target == "ort-cpp":
        import onnxruntime  # noqa: F401
    else:
        import openvino  # noqa: F401
    sys.dont_write_bytecode = True
    fence = confine_writes([ctx.scratch.parent, ctx.out_dir])
    ctx.set_stage(f"{label}: loading the library")
    try:
        run = (_ort_runner(library, ctx.cpu_threads) if target == "ort-cpp"
               else _ov_runner(library, ctx.cpu_threads, ctx.scratch))
    except Exception as exc:  # noqa: BLE001
        return JobOutput(data={"load_error": f"{label}: loading failed: {short_error(exc)}", "confinement": fence})
    model = onnx.load_model(str(args["model_path"]))
    nodes = {nid: n for nid, n, _ in find_nodes(model, domain, op_type)}
    out_dtypes = [o.get("dtype") or "float32" for o in args["outputs"]]
    data: dict[str, Any] = {"samples": [], "model": None, "confinement": fence}
    out_arrays: dict[str, np.ndarray] = {}
    for i, sample in enumerate(args.get("samples") or []):
        ctx.set_stage(f"{label}: sample {i + 1}")
        node = nodes.get(sample["node"])
        feeds = [arrays.get(f"s{i}.in{j}") for j in range(len(node.input))] if node is not None else []
        entry: dict[str, Any] = {"node": sample["node"], "error": None}
        started = time.perf_counter()
        try:
            if node is None:
                raise KeyError("node not found in the model")
            specs = [None if a is None else (a.dtype.name, list(a.shape)) for a in feeds]
            values = run(single_node_model(model, node, specs, out_dtypes), [a for a in feeds if a is not None])
            for j, v in enumerate(values):
                out_arrays[f"s{i}.out{j}"] = v
        except Exception as exc:  # noqa: BLE001
            entry["error"] = f"{label} failed on node {sample['node'][:60]}: {short_error(exc)}"
        entry["seconds"] = round(time.perf_counter() - started, 4)
        data["samples"].append(entry)
    if args.get("run_model"):
        ctx.set_stage(f"{label}: whole model")
        names = [o.name for o in model.graph.output]
        inits = {t.name for t in model.graph.initializer}
        feeds = [arrays[f"feed:{vi.name}"] for vi in model.graph.input if vi.name not in inits]
        entry = {"error": None, "outputs": names}
        try:
            for name, v in zip(names, run(str(args["model_path"]), feeds)):
                out_arrays[f"model:{name}"] = v
        except Exception as exc:  # noqa: BLE001
            entry["error"] = f"whole model with the {label} failed: {short_error(exc)}"
        data["model"] = entry
    return JobOutput(data=data, arrays=out_arrays)
