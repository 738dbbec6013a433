"""Compile a generated C++ package with CMake and check the library against the reference.

CMake runs arbitrary commands from a CMakeLists.txt (``execute_process``, custom commands), and the package's
sources are derived from a model (RELIABILITY R31). So the build is a job in a one-off worker
(:func:`studio.core.sandbox.run_job`): the package's regular files are copied into the job's empty scratch
folder and built there, with the worker's timeout and memory limit and an allowlisted environment; on Linux
with Landlock every write of CMake, the compiler and anything they start is fenced into the job's folders
(:func:`studio.plugins.confine.fence_build`). Only the built ``lib*.so`` comes back, into the package's
``build/``. Builds are off on a shared server (``serve --shared``). The library is then loaded in a one-off,
confined worker (``register_custom_ops_library`` for ONNX Runtime,
``core.add_extension`` for OpenVINO -- native code can crash, and a loaded library must not stay in a shared
worker), every captured sample runs through a one-node model, and the whole model runs with the library.
TensorRT packages are never built here: TensorRT is not installable on this machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, WorkerError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.model import ModelHandle
from studio.core.paths import atomic_write_bytes, safe_child
from studio.core.sandbox import Limits, default_limits, run_job, scrub_message
from studio.plugins import toolchain
from studio.plugins.opgraph import find_nodes, single_node_model
from studio.plugins.runner import OpRunResult, op_job_args, op_run_result
from studio.plugins.signature import OpSignature
from studio.plugins.usercode import short_error
from studio.plugins.confine import fence_build
from studio.plugins.runner import worker_message
from studio.plugins.confine import confine_writes

__all__ = ["BUILDABLE", "BuildResult", "build_package", "builds_allowed", "cmake_build_job", "native_check_job"]

BUILDABLE = ("ort-cpp", "openvino-cpp")
BUILD_TIMEOUT_S = 600
BUILD_MEMORY_BYTES = 4 * 2**30       # per process (RLIMIT_AS is inherited by cmake, cc1plus and ld)
_MAX_SOURCE_BYTES = 64 * 2**20       # what is copied into the build job (samples and build outputs excluded)


def builds_allowed() -> bool:
    """False on a shared server (``serve --shared`` sets ``ONNX_STUDIO_SHARED=1``): a build runs a model-derived
    CMakeLists.txt and compiler on the server."""
    return os.environ.get("ONNX_STUDIO_SHARED") != "1"


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
                              stdin=subprocess.DEVNULL, errors="replace")
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s"
    return proc.returncode, (proc.stdout + proc.stderr)


def _copy_sources(package_dir: Path, dest: Path) -> None:
    """The package's regular files (no links, no ``build/``/``samples/``) into ``dest``, at most 64 MiB."""
    total = 0
    for path in sorted(package_dir.rglob("*")):
        rel = path.relative_to(package_dir)
        if rel.parts[0] in ("build", "samples", "__pycache__") or path.is_symlink() or not path.is_file():
            continue
        total += path.stat().st_size
        if total > _MAX_SOURCE_BYTES:
            raise StudioError("the package folder holds over 64 MiB of sources; build it by hand",
                              code=ErrorCode.BAD_PATH)
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)  # scratch: into the build worker's scratch copy


def _tail(text: str, folder: Path, lines: int = 25) -> str:
    keep = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return "\n".join(scrub_message(ln, (folder,)) for ln in keep)


def build_package(package_dir: Path, target: str, *, timeout_s: float = BUILD_TIMEOUT_S, jobs: int = 2,
                  pool_key: str = "default", on_tick: Callable[[float], None] | None = None) -> BuildResult:
    """``cmake`` configure + build of one generated package in a one-off sandboxed worker (module docs); the
    library lands in ``package_dir/build``."""
    package_dir = Path(package_dir)
    if target == "tensorrt":
        return BuildResult(target, False, "not compiled here: TensorRT is not installable on this machine (it needs "
                           "CUDA, an NVIDIA GPU and NVIDIA's packages); build it where TensorRT is installed")
    if target not in BUILDABLE:
        raise StudioError(f"only {', '.join(BUILDABLE)} packages are built (got {target})", code=ErrorCode.BAD_TARGET)
    if not builds_allowed():
        raise StudioError("building C++ plugins is off on a shared server (it would run the package's CMake and "
                          "compiler on the server); download the package and build it locally",
                          code=ErrorCode.SHARED_MODE)
    if not (package_dir / "CMakeLists.txt").is_file():
        raise StudioError(f"no CMakeLists.txt in the {target} package; generate it first", code=ErrorCode.BAD_PATH)
    tools = [toolchain.cmake(), toolchain.cxx_compiler()]
    dev = toolchain.ort_include_dir() if target == "ort-cpp" else toolchain.openvino_cmake_dir()
    missing = [t.reason for t in (*tools, dev) if not t.ok]
    info = {"cmake": tools[0].path, "cxx": tools[1].path, "dev_files": dev.path}
    if missing:
        return BuildResult(target, False, f"cannot build: {missing[0]}", toolchain=info)
    define = f"-DORT_INCLUDE_DIR={dev.path}" if target == "ort-cpp" else f"-DOpenVINO_DIR={dev.path}"
    base = default_limits()
    limits = Limits(timeout_s=float(timeout_s) + 30.0, memory_bytes=max(base.memory_bytes, BUILD_MEMORY_BYTES),
                    cpu_threads=base.cpu_threads, minimal_env=True)
    args = {"cmake": tools[0].path or "cmake", "cxx": tools[1].path, "define": define, "jobs": max(1, int(jobs)),
            "timeout_s": float(timeout_s)}
    started = time.perf_counter()
    stage = f"building the {target} package"
    args["source"] = str(package_dir.resolve())
    with tempfile.TemporaryDirectory(prefix="studio-build-") as tmp:
        out = Path(tmp) / "out"
        try:
            res = run_job("plugins.cmake_build", args, stage=stage, limits=limits, fresh=True, pool_key=pool_key,
                          on_tick=on_tick, out_dir=out)
        except WorkerError as exc:
            if exc.kind == "timeout":
                message = f"build timed out after {timeout_s:g} s; its worker was stopped"
            elif exc.kind == "memory":
                message = f"build exceeded the worker memory limit ({limits.memory_gib:.1f} GiB); its worker was stopped"
            elif exc.kind == "cancelled":
                message = "build was stopped"
            else:
                message = f"build failed: {scrub_message(str(exc), (tmp, package_dir)).split(' failed: ', 1)[-1][:300]}"
            return BuildResult(target, False, message, seconds=time.perf_counter() - started, toolchain=info)
        data = res.data
        seconds = time.perf_counter() - started
        log = str(data.get("log", ""))
        info["sandbox"] = data.get("fence") or {}
        libs = sorted(out.glob("lib*.so"))
        if data.get("code") == 124:
            return BuildResult(target, False, f"build timed out after {timeout_s:g} s; its worker was stopped",
                               seconds=seconds, log_tail=_tail(log, Path(tmp)), toolchain=info)
        if data.get("code") != 0 or not libs:
            first_error = next((ln for ln in log.splitlines() if "error" in ln.lower()), "see the log")
            return BuildResult(target, False, f"build failed: {scrub_message(first_error, (tmp, package_dir))[:300]}",
                               seconds=seconds, log_tail=_tail(log, Path(tmp)), toolchain=info)
        rel = f"build/{libs[0].name}"
        atomic_write_bytes(safe_child(package_dir, rel), libs[0].read_bytes())
        return BuildResult(target, True, f"built {libs[0].name} in {seconds:.1f} s", rel, seconds,
                           _tail(log, Path(tmp), 5), toolchain=info)


@job("plugins.cmake_build")
def cmake_build_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Worker side: copy the sources into scratch, fence writes (Landlock), configure and build there, hand the
    library back through ``ctx.out_dir``."""
    work = ctx.scratch / "src"
    _copy_sources(Path(str(args["source"])), work)
    # the job's folder, the results folder and the worker's own folder (its HOME: CMake's user package registry)
    fence = fence_build([ctx.scratch.parent, ctx.out_dir, ctx.scratch.parent.parent])
    timeout_s = float(args["timeout_s"])
    started = time.perf_counter()
    ctx.set_stage("CMake configure")
    cmd = [str(args["cmake"]), "-S", ".", "-B", "build", str(args["define"]), "-DCMAKE_BUILD_TYPE=Release"]
    if args.get("cxx"):
        cmd.append(f"-DCMAKE_CXX_COMPILER={args['cxx']}")
    code, log = _run(cmd, work, timeout_s)
    if code == 0:
        ctx.set_stage("CMake build")
        remaining = max(1.0, timeout_s - (time.perf_counter() - started))
        code, more = _run([str(args["cmake"]), "--build", "build", "-j", str(int(args["jobs"]))], work, remaining)
        log += more
    if code == 0:
        for lib in sorted((work / "build").glob("lib*.so")):
            if lib.is_file() and not lib.is_symlink():
                shutil.copyfile(lib, ctx.out_dir / lib.name)  # scratch: the worker's job folder
                break
    log = log.replace(str(work) + "/", "").replace(str(work), ".")
    return JobOutput(data={"code": code, "log": log[-20000:], "fence": fence})


def check_library(handle: ModelHandle, sig: OpSignature, target: str, library: Path, *, run_model: bool = True,
                  pool_key: str = "default", timeout_s: float | None = None,
                  on_tick: Callable[[float], None] | None = None) -> OpRunResult:
    """Load the built library in a one-off, confined worker; run the samples (and the model) against the reference."""
    args, arrays = op_job_args(sig, handle)
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
        return OpRunResult(sig.qualified, target, "error", worker_message(exc, label, limits),
                           seconds=time.perf_counter() - started, reference=sig.reference)
    return op_run_result(sig, target, res.data, res.arrays, time.perf_counter() - started)


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
