"""What ORT actually allocates for activations: the memory-pattern block, read in a child process.

Why this way: ORT's CPU arena keeps no peak it will report to Python, and its
logs do not show the pattern. With the arena off (``enable_cpu_mem_arena=False``)
and memory patterns on, the second run of a session allocates all planned
intermediate tensors as ONE aligned block of the pattern's peak size at the
start of the run (``ExecutionFrame``: ``alloc->Alloc(PeakSize())``), then the
graph outputs. A tiny LD_PRELOAD shim (built here with the system C compiler,
in a temporary folder) records the sizes of aligned allocations
(``posix_memalign``/``aligned_alloc``, which ORT's CPU allocator uses and numpy
does not) while that run is armed; the first one is the block. Linux with a C
compiler only; otherwise :class:`MeasureUnavailable`.
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

_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
static int (*real_pm)(void**, size_t, size_t);
static void* (*real_aa)(size_t, size_t);
static volatile int armed = 0;
static size_t log_[4096];
static volatile int n_ = 0;
void studio_shim_arm(int on) { if (on) n_ = 0; armed = on; }
int studio_shim_count(void) { return n_; }
size_t studio_shim_get(int i) { return log_[i]; }
static void rec(size_t s) { if (armed) { int i = __sync_fetch_and_add(&n_, 1); if (i < 4096) log_[i] = s; } }
int posix_memalign(void** p, size_t a, size_t s) {
  if (!real_pm) real_pm = (int (*)(void**, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  rec(s); return real_pm(p, a, s);
}
void* aligned_alloc(size_t a, size_t s) {
  if (!real_aa) real_aa = (void* (*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
  rec(s); return real_aa(a, s);
}
"""

_CHILD = r"""
import ctypes, json, sys
import numpy as np, onnxruntime as ort
shim = ctypes.CDLL(None)
shim.studio_shim_get.restype = ctypes.c_size_t
so = ort.SessionOptions()
so.enable_cpu_mem_arena = False
so.enable_mem_pattern = True
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
so.intra_op_num_threads = 1
sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
types = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
         "tensor(int32)": np.int32, "tensor(float16)": np.float16, "tensor(bool)": np.bool_,
         "tensor(uint8)": np.uint8, "tensor(int8)": np.int8}
if len(sys.argv) > 2:             # the caller's feeds (the dims the plan was made at)
    with np.load(sys.argv[2], allow_pickle=False) as data:
        feeds = {k: data[k] for k in data.files}
else:
    feeds = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], types.get(i.type, np.float32))
             for i in sess.get_inputs()}
sess.run(None, feeds)             # first run: traces the plan, builds the memory pattern
shim.studio_shim_arm(1)
sess.run(None, feeds)             # second run: one block for the pattern, then the outputs
shim.studio_shim_arm(0)
print(json.dumps([int(shim.studio_shim_get(i)) for i in range(min(shim.studio_shim_count(), 64))]))
"""


class MeasureUnavailable(RuntimeError):
    """The measurement needs Linux and a C compiler (cc/gcc)."""


@dataclass(frozen=True)
class OrtActivationMeasure:
    pattern_bytes: int                   # ORT's memory-pattern block (all planned intermediates)
    allocations: tuple[int, ...]         # every aligned allocation of the armed run, in order

    def to_dict(self) -> dict:
        return {"pattern_bytes": self.pattern_bytes, "allocations": list(self.allocations)}


def _compiler() -> str:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not sys.platform.startswith("linux") or cc is None:
        raise MeasureUnavailable("measuring ORT's activation memory needs Linux and a C compiler (install gcc)")
    return cc


def measure_ort_activations(model_path: str | Path, *, feeds: Mapping[str, np.ndarray] | None = None,
                            timeout_s: float = 300) -> OrtActivationMeasure:
    """ORT's activation block for ``model_path`` run on ``feeds`` (default: zeros, symbolic input dims
    at 1), in a child process."""
    cc = _compiler()
    with tempfile.TemporaryDirectory(prefix="studio-memshim-") as tmp:
        src, lib, child = Path(tmp, "shim.c"), Path(tmp, "libshim.so"), Path(tmp, "child.py")
        src.write_text(_SHIM)      # scratch: a TemporaryDirectory this function made and removes
        child.write_text(_CHILD)   # scratch: same temporary folder
        extra = []
        if feeds is not None:
            extra = [str(Path(tmp, "feeds.npz"))]
            np.savez(extra[0], **{k: np.asarray(v) for k, v in feeds.items()})  # scratch: same folder
        built = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"],
                               capture_output=True, text=True, timeout=120)
        if built.returncode != 0:
            raise MeasureUnavailable(f"could not build the allocation shim: {built.stderr.strip()[-200:]}")
        env = dict(os.environ, LD_PRELOAD=str(lib), OMP_NUM_THREADS="1")
        run = subprocess.run([sys.executable, str(child), str(Path(model_path).resolve()), *extra], env=env,
                             capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise RuntimeError(f"ORT could not run the model for the memory measurement: {last}")
    sizes = tuple(json.loads(run.stdout.strip().splitlines()[-1]))
    return OrtActivationMeasure(sizes[0] if sizes else 0, sizes)
