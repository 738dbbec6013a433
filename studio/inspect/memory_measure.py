"""What ORT and OpenVINO actually allocate for activations, read in a child process.

Why this way: neither engine reports its activation memory to Python. A tiny
LD_PRELOAD shim (built here with the system C compiler, in a temporary folder)
records the aligned allocations (``posix_memalign``/``aligned_alloc``, which
both engines' CPU allocators use and numpy does not) made while a run is armed,
and the peak of those still live (``free`` of one of them is seen). Linux with
a C compiler only; otherwise :class:`MeasureUnavailable`.

* ONNX Runtime: with the arena off (``enable_cpu_mem_arena=False``) and memory
  patterns on, the second run of a session allocates all planned intermediate
  tensors as ONE aligned block of the pattern's peak size at the start of the
  run (``ExecutionFrame``: ``alloc->Alloc(PeakSize())``), then the graph
  outputs: the first allocation is the block.
* OpenVINO CPU: on a model with static shapes the plugin's ``MemoryControl``
  places every intermediate tensor of the compiled (fused) graph in one
  workspace solved by ``ov::MemorySolver`` (32-byte boxes) and allocates it at
  compile time; graph inputs and outputs, and the tensors computed in place
  into them, get their own blocks, weights theirs. ``CompiledModel.release_memory()``
  frees that workspace and the next inference allocates it again: the peak of
  the aligned bytes live during that inference is the workspace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from studio.core.errors import engine_message

_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#define CAP 4096
static int (*real_pm)(void**, size_t, size_t);
static void* (*real_aa)(size_t, size_t);
static void (*real_free)(void*);
static volatile int armed = 0, lock_ = 0;
static size_t log_[CAP];
static void* ptr_[CAP];
static int n_ = 0;
static size_t live_ = 0, peak_ = 0;
static void take(void) { while (__sync_lock_test_and_set(&lock_, 1)) {} }
static void give(void) { __sync_lock_release(&lock_); }
void studio_shim_arm(int on) { take(); if (on) { n_ = 0; live_ = 0; peak_ = 0; } armed = on; give(); }
int studio_shim_count(void) { return n_; }
size_t studio_shim_get(int i) { return log_[i]; }
size_t studio_shim_peak(void) { return peak_; }
static void rec(void* p, size_t s) {
  if (!armed || !p) return;
  take();
  if (n_ < CAP) { log_[n_] = s; ptr_[n_] = p; }
  n_++; live_ += s; if (live_ > peak_) peak_ = live_;
  give();
}
int posix_memalign(void** p, size_t a, size_t s) {
  if (!real_pm) real_pm = (int (*)(void**, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  int r = real_pm(p, a, s); if (r == 0) rec(*p, s); return r;
}
void* aligned_alloc(size_t a, size_t s) {
  if (!real_aa) real_aa = (void* (*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
  void* p = real_aa(a, s); rec(p, s); return p;
}
void free(void* p) {
  if (!real_free) real_free = (void (*)(void*))dlsym(RTLD_NEXT, "free");
  if (armed && p) {
    take();
    for (int i = 0; i < n_ && i < CAP; i++) if (ptr_[i] == p) { ptr_[i] = 0; live_ -= log_[i]; break; }
    give();
  }
  real_free(p);
}
"""

# Shared by both children: the shim's functions, and the feeds (the caller's, or zeros at dims 1).
_CHILD_COMMON = r"""
import ctypes, json, sys
shim = ctypes.CDLL(None)
shim.studio_shim_get.restype = ctypes.c_size_t
shim.studio_shim_peak.restype = ctypes.c_size_t
def caller_feeds():
    if len(sys.argv) < 3:
        return None
    import numpy as np
    with np.load(sys.argv[2], allow_pickle=False) as data:
        return {k: data[k] for k in data.files}
def armed_sizes():
    return [int(shim.studio_shim_get(i)) for i in range(min(shim.studio_shim_count(), 256))]
"""

_ORT_CHILD = _CHILD_COMMON + r"""
import numpy as np, onnxruntime as ort
so = ort.SessionOptions()
so.enable_cpu_mem_arena = False
so.enable_mem_pattern = True
import os
so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, os.environ.get("STUDIO_MEASURE_ORT_LEVEL",
                                                                                 "ORT_DISABLE_ALL"))
so.intra_op_num_threads = 1
sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
types = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
         "tensor(int32)": np.int32, "tensor(float16)": np.float16, "tensor(bool)": np.bool_,
         "tensor(uint8)": np.uint8, "tensor(int8)": np.int8}
feeds = caller_feeds()           # the caller's feeds (the dims the plan was made at)
if feeds is None:
    feeds = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], types.get(i.type, np.float32))
             for i in sess.get_inputs()}
sess.run(None, feeds)             # first run: traces the plan, builds the memory pattern
shim.studio_shim_arm(1)
sess.run(None, feeds)             # second run: one block for the pattern, then the outputs
shim.studio_shim_arm(0)
print(json.dumps(armed_sizes()))
"""

_OV_CHILD = _CHILD_COMMON + r"""
sys.modules["openvino_telemetry"] = None      # OpenVINO's own telemetry stub (studio.core.telemetry)
import os
import numpy as np, openvino as ov
from studio.core.mapped_pages import mapped_resident_bytes, released_pages
def vm(key):
    with open("/proc/self/status") as fh:
        return next((int(l.split()[1]) * 1024 for l in fh if l.startswith(key + ":")), 0)
try:
    base_rss = vm("VmRSS")
    # OpenVINO maps the weight files read-only and repacks each FullyConnected weight into its own buffer:
    # the mapped pages it read are dropped as it goes (studio.core.mapped_pages), or it holds them twice
    # (large weights only; STUDIO_MEASURE_RELEASE_PAGES: "1" always, "0" never)
    folder = os.path.dirname(sys.argv[1])
    force = {"1": True, "0": False}.get(os.environ.get("STUDIO_MEASURE_RELEASE_PAGES", ""))
    pages = released_pages(sys.argv[1], force=force)
    with pages:
        core = ov.Core()
        model = core.read_model(sys.argv[1])
        feeds = caller_feeds()
        if feeds is None:
            feeds = {p.get_any_name(): np.zeros([d.get_length() if d.is_static else 1 for d in p.get_partial_shape()],
                                                p.get_element_type().to_dtype()) for p in model.inputs}
        ports = {n: p for p in model.inputs for n in p.get_names()}
        feeds = {k: v for k, v in feeds.items() if k in ports}
        config = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32"}
        static = True
        try:                              # the plan's dims as static shapes: one solved workspace
            if model.is_dynamic():
                model.reshape({ports[k]: ov.PartialShape(list(v.shape)) for k, v in feeds.items()})
            compiled = core.compile_model(model, "CPU", config)
        except Exception:                 # a shape only some branch allows: compile it as it is
            static = False
            del model
            compiled = core.compile_model(core.read_model(sys.argv[1]), "CPU", config)
        request = compiled.create_infer_request()
        request.infer(feeds)              # first inference: every node's primitive made
    mapped_rss = mapped_resident_bytes(folder)
    compiled.release_memory()         # frees the intermediates' workspace (not I/O blocks, not weights)
    shim.studio_shim_arm(1)
    request.infer(feeds)              # allocates it again
    shim.studio_shim_arm(0)
    kinds = [op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()]
    print(json.dumps({"peak": int(shim.studio_shim_peak()), "allocations": armed_sizes(), "static": static,
                      "nodes": sum(k not in ("Input", "Output", "Const") for k in kinds),
                      "peak_rss": vm("VmHWM"), "base_rss": base_rss, "mapped_rss": mapped_rss,
                      "released": getattr(pages, "released", {})}))
except Exception as exc:
    print(json.dumps({"error": str(exc)}))
"""


class MeasureUnavailable(RuntimeError):
    """The measurement needs Linux and a C compiler (cc/gcc)."""


@dataclass(frozen=True)
class OrtActivationMeasure:
    pattern_bytes: int                   # ORT's memory-pattern block (all planned intermediates)
    allocations: tuple[int, ...]         # every aligned allocation of the armed run, in order

    def to_dict(self) -> dict:
        return {"pattern_bytes": self.pattern_bytes, "allocations": list(self.allocations)}


@dataclass(frozen=True)
class OvActivationMeasure:
    workspace_bytes: int                 # peak aligned bytes live in the inference after release_memory()
    allocations: tuple[int, ...]         # the aligned allocations of that inference, in order
    static_shapes: bool                  # compiled at the feeds' shapes (False: the model's dynamic ones)
    runtime_nodes: int                   # nodes of the compiled graph that compute (after OpenVINO's fusions)
    peak_rss_bytes: int = 0              # the child's peak resident memory (VmHWM), weights included
    base_rss_bytes: int = 0              # its resident memory before reading the model (Python + OpenVINO)
    mapped_rss_bytes: int = 0            # the weight files' mapped pages resident after compile + first inference
    released: tuple[tuple[str, int], ...] = ()   # (file, mapped range bytes) whose pages were dropped

    def to_dict(self) -> dict:
        return {**self.__dict__, "allocations": list(self.allocations)}


def _compiler(engine: str) -> str:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not sys.platform.startswith("linux") or cc is None:
        raise MeasureUnavailable(f"measuring {engine}'s activation memory needs Linux and a C compiler (install gcc)")
    return cc


def _run_child(source: str, engine: str, model_path: str | Path, feeds: Mapping[str, np.ndarray] | None,
               timeout_s: float, env_extra: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``source`` on the model (and the feeds, as an .npz) in a child with the shim preloaded."""
    cc = _compiler(engine)
    with tempfile.TemporaryDirectory(prefix="studio-memshim-") as tmp:
        src, lib, child = Path(tmp, "shim.c"), Path(tmp, "libshim.so"), Path(tmp, "child.py")
        src.write_text(_SHIM)      # scratch: a TemporaryDirectory this function made and removes
        child.write_text(source)   # scratch: same temporary folder
        extra = []
        if feeds is not None:
            extra = [str(Path(tmp, "feeds.npz"))]
            np.savez(extra[0], **{k: np.asarray(v) for k, v in feeds.items()})  # scratch: same folder
        built = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"],
                               capture_output=True, text=True, timeout=120)
        if built.returncode != 0:
            raise MeasureUnavailable(f"could not build the allocation shim: {built.stderr.strip()[-200:]}")
        env = dict(os.environ, LD_PRELOAD=str(lib), OMP_NUM_THREADS="1", ORT_DISABLE_TELEMETRY="1",
                   **(env_extra or {}))
        return subprocess.run([sys.executable, str(child), str(Path(model_path).resolve()), *extra], env=env,
                              capture_output=True, text=True, timeout=timeout_s, cwd=tmp)


def _last_json(run: subprocess.CompletedProcess, engine: str):
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise RuntimeError(f"{engine} could not run the model for the memory measurement: {last}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def measure_ort_activations(model_path: str | Path, *, feeds: Mapping[str, np.ndarray] | None = None,
                            timeout_s: float = 300, optimized: bool = False) -> OrtActivationMeasure:
    """ORT's activation block for ``model_path`` run on ``feeds`` (default: zeros, symbolic input dims
    at 1), in a child process; ``optimized``: at ORT's default graph optimization level (ORT_ENABLE_ALL),
    as users run it, else with the optimizations off (the graph as written)."""
    level = {"STUDIO_MEASURE_ORT_LEVEL": "ORT_ENABLE_ALL"} if optimized else None
    sizes = tuple(_last_json(_run_child(_ORT_CHILD, "ORT", model_path, feeds, timeout_s, level), "ORT"))
    return OrtActivationMeasure(sizes[0] if sizes else 0, sizes)


def measure_openvino_activations(model_path: str | Path, *, feeds: Mapping[str, np.ndarray] | None = None,
                                 timeout_s: float = 300, release_pages: bool | None = None) -> OvActivationMeasure:
    """OpenVINO CPU's intermediate-tensor workspace for ``model_path`` compiled at the shapes of ``feeds``
    (default: zeros, dynamic dims at 1; one thread, one stream, f32 inference precision), in a child.
    ``release_pages``: drop the weight files' mapped pages OpenVINO has read while it compiles
    (:mod:`studio.core.mapped_pages`: the child holds the weights about once, not twice; the workspace
    is the same); None: for weights from :data:`studio.core.mapped_pages.MIN_WEIGHT_BYTES` only."""
    env = None if release_pages is None else {"STUDIO_MEASURE_RELEASE_PAGES": "1" if release_pages else "0"}
    d = _last_json(_run_child(_OV_CHILD, "OpenVINO", model_path, feeds, timeout_s, env), "OpenVINO")
    if "error" in d:
        raise RuntimeError(f"OpenVINO could not run the model for the memory measurement: "
                           f"{engine_message(d['error'], 300)}")
    return OvActivationMeasure(int(d["peak"]), tuple(d["allocations"]), bool(d["static"]), int(d["nodes"]),
                               int(d.get("peak_rss", 0)), int(d.get("base_rss", 0)), int(d.get("mapped_rss", 0)),
                               tuple(sorted((str(k), int(v)) for k, v in d.get("released", {}).items())))
