"""ncnn adapter: ONNX -> ``.ncnn.param`` / ``.ncnn.bin`` with pnnx, then ncnn's Python API on the
CPU -- all in a sandbox worker. Declared in :mod:`studio.core.engines.table` (row "ncnn").

pnnx is run as its own program (the binary inside the ``pnnx`` wheel; the wheel's Python
wrapper imports torch, which an ONNX conversion does not need) in a child process with a time
limit, in a folder of its own: pnnx writes half a dozen side files next to its input, so the
input is linked into that folder and never converted beside the user's file. pnnx converts at
fixed input shapes (``inputshape=[1,3,224,224]f32,...``): like LiteRT, a runner converts again
when the feed shapes change.

pnnx renames the blobs ``in0..`` / ``out0..`` in the ONNX model's input and output order, and
says in the script it writes (``*_ncnn.py``) which of them carry a batch axis
(``batch_index=0``); that mapping is read back from the script and kept beside the exported
files (``model.ncnn.json``). A conversion that leaves layers ncnn does not know
(``Tensor.to``, ``Gather``...) is a refusal naming them; a crash of pnnx is a refusal too.

Precision: ``f32`` pins ncnn's fp16 options off (``use_fp16_storage/packed/arithmetic`` and pnnx
``fp16=0``); ``f16`` stores weights and activations in fp16 (``fp16=1``, storage and packed on)
and computes in fp16 where the CPU has fp16 arithmetic (ARMv8.2); on x86 ncnn computes in fp32.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.engines.base import Availability, WorkerEngine, check_model_file, package_version, require_available
from studio.core.engines.conversion import (Conversion, ConversionFailed, ConvertedRunner, conversion_output,
                                            onnx_output_types, onnx_typed)
from studio.core.engines.base import default_cpu_threads, elapsed_ms, require_feeds, require_outputs
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job

__all__ = ["NcnnEngine", "NcnnRunner", "convert_to_ncnn", "ncnn_convert_job", "pnnx_binary"]

PNNX_TIMEOUT_S = 600.0        # one conversion; the worker's own limit still applies around it
NO_BATCH = 233                # ncnn's "no batch axis" batch_index
IO_FILE = "model.ncnn.json"   # blob <-> ONNX name mapping beside an exported .param/.bin
_PNNX_TO_ONNX = {"Tensor.to": "Cast", "Tensor.index": "Gather", "torch.gather": "GatherElements",
                 "Tensor.expand": "Expand", "torch.where": "Where", "Tensor.slice": "Slice"}
_INTEGER_TYPES = (2, 3, 4, 5, 6, 7, 9, 12, 13)    # ONNX uint8 ... uint64, bool
_DTYPES = {1: "f32", 10: "f16", 11: "f64", 7: "i64", 6: "i32", 5: "i16", 3: "i8", 2: "u8", 9: "u8"}


def pnnx_binary() -> Path | None:
    """The pnnx program inside the ``pnnx`` wheel, found without importing its package (torch)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("pnnx")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        exe = Path(folder) / "pnnx"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
    return None


class NcnnEngine(WorkerEngine, engine="ncnn"):
    def _probe_installed(self) -> Availability:
        if pnnx_binary() is None:
            return Availability(False, package_version("ncnn"), "ncnn's converter pnnx is not installed "
                                "(pip install --no-deps pnnx)")
        return Availability(True, package_version("ncnn"), None, ("CPU",))

    def convert(self, model_path: Path, out_dir: Path, *, shapes: Mapping[str, tuple[int, ...]],
                precision: str = "f32", limits: Limits | None = None, pool_key: str = "default") -> Conversion:
        """Convert ``model_path`` at ``shapes`` into ``out_dir`` (``model.ncnn.param``, ``model.ncnn.bin``
        and ``model.ncnn.json``); the Conversion's path is the ``.param``."""
        require_available(self)
        path = check_model_file(model_path)
        out_dir = Path(out_dir).resolve()
        res = run_job("ncnn.convert", {"model_path": str(path), "precision": precision,
                                       "shapes": {k: list(v) for k, v in shapes.items()}},
                      stage="ncnn conversion (pnnx)", limits=limits, out_dir=out_dir,
                      pool_key=pool_key + self.pool_suffix)
        return Conversion.from_data(self.name, res.data, out_dir / "model.ncnn.param")

    def export_convert(self, model_path: Path, folder: Path, *, shapes: Mapping[str, tuple[int, ...]],
                       reference: Mapping[str, np.ndarray] | None = None, pool_key: str = "default") -> Conversion:
        """The export's fp32 conversion into ``folder``: ``model.ncnn.param`` (the artifact), ``.bin`` and
        ``model.ncnn.json`` (blob <-> ONNX names) beside it."""
        return self.convert(model_path, folder, shapes=shapes, pool_key=pool_key)

    @staticmethod
    def deploy_snippet(inputs: list[str], outputs: list[str]) -> str:
        """How a device loads the exported files (the export README)."""
        io = ", ".join(f"in{i} <- {n!r}" for i, n in enumerate(inputs[:4]))
        return ("Load it (Python, `pip install ncnn`; the C++ API `ncnn::Net` is the same; Android/iOS: the ncnn "
                "prebuilt libraries):\n\n```python\nimport ncnn, numpy as np\nnet = ncnn.Net()\n"
                "net.opt.use_fp16_storage = net.opt.use_fp16_arithmetic = False   # as verified here (fp32)\n"
                "net.load_param(\"model.ncnn.param\"); net.load_model(\"model.ncnn.bin\")\n"
                "with net.create_extractor() as ex:\n"
                "    ex.input(\"in0\", ncnn.Mat(x, batch_index=0).clone())   # x: the ONNX input, NCHW\n"
                "    _, out0 = ex.extract(\"out0\")\n    y = out0.numpy(batch_index=0)\n```\n\n"
                f"Blobs: {io}; outputs out0.. in the ONNX order {outputs[:4]!r} (model.ncnn.json lists them, "
                "with the inputs that carry a batch axis).\n")


# ============================================================================ worker side

def pnnx_command(onnx_name: str, shapes: list[tuple[tuple[int, ...], str]], precision: str = "f32") -> list[str]:
    """pnnx's command line (also recorded in the check and the export manifest)."""
    if precision not in ("f32", "f16", "default"):
        raise ValueError(f"ncnn conversion precision must be f32 or f16, got {precision!r}")
    spec = ",".join("[" + ",".join(str(int(d)) for d in shape) + "]" + dtype for shape, dtype in shapes)
    return ["pnnx", onnx_name, f"inputshape={spec}", f"fp16={1 if precision == 'f16' else 0}"]


def _link_model(onnx_path: Path, folder: Path) -> Path:
    """The model (and its external data files) linked into pnnx's own folder."""
    import onnx

    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "model.onnx"
    link.unlink(missing_ok=True)  # scratch: pnnx's own temporary folder
    os.symlink(onnx_path, link)  # scratch: pnnx's own temporary folder
    model = onnx.load_model(str(onnx_path), load_external_data=False)
    for t in model.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location" and "/" not in entry.value and entry.value not in ("model.onnx", ""):
                target = folder / entry.value
                if not target.exists():
                    os.symlink(onnx_path.parent / entry.value, target)  # scratch: pnnx's own temporary folder
    return link


def _io_map(script: str, onnx_inputs: list[str], onnx_outputs: list[str]) -> dict[str, Any]:
    """Blob names and batch axes from pnnx's ``*_ncnn.py``, matched to the ONNX names by order: each
    [ONNX name, blob, batch_index] (the axis ncnn drops and ``numpy()`` puts back; 233 means none)."""
    ins = re.findall(r'ex\.input\("(\w+)",\s*ncnn\.Mat\(\w+\.numpy\(\)(?:,\s*batch_index=(\d+))?', script)
    extracts = dict((var, blob) for var, blob in re.findall(r'_,\s*(\w+)\s*=\s*ex\.extract\("(\w+)"\)', script))
    outs = [(extracts[var], b) for var, b in re.findall(r'(\w+)\.numpy\((?:batch_index=(\d+))?\)', script)
            if var in extracts]
    if len(ins) != len(onnx_inputs):        # a script this parser does not read: pnnx's names, no batch axis
        ins = [(f"in{i}", "") for i in range(len(onnx_inputs))]
    if len(outs) != len(onnx_outputs):
        outs = [(f"out{i}", "") for i in range(len(onnx_outputs))]
    return {"inputs": [[n, blob, int(b or NO_BATCH)] for n, (blob, b) in zip(onnx_inputs, ins)],
            "outputs": [[n, blob, int(b or NO_BATCH)] for n, (blob, b) in zip(onnx_outputs, outs)]}


def _batch_index(value: Any) -> int:
    """An io entry's batch axis (older maps said True/False)."""
    if isinstance(value, bool):
        return 0 if value else NO_BATCH
    return int(value)


def unknown_layers(param: Path) -> list[str]:
    """Layer types in a ``.param`` this ncnn build does not have (what pnnx could not lower)."""
    import ncnn

    types: list[str] = []
    for line in param.read_text(errors="replace").splitlines()[2:]:
        parts = line.split()
        if parts and parts[0] not in types and ncnn.layer_to_index(parts[0]) < 0:
            types.append(parts[0])
    return types


def _stderr_of(call: Callable[[], Any]) -> tuple[Any, str]:
    """``call()`` with file descriptor 2 captured (and written back after): ncnn says why a load failed only
    there (NCNN_LOGE), never in its return code."""
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as tmp:  # scratch: an unnamed temporary file, gone when closed
            os.dup2(tmp.fileno(), 2)
            try:
                result = call()
            finally:
                os.dup2(saved, 2)
            tmp.seek(0)
            said = tmp.read().decode(errors="replace")
    finally:
        os.close(saved)
    if said:
        os.write(2, said.encode())
    return result, said


def _layer_lines(param: Path) -> list[list[str]]:
    """The ``.param``'s layer lines, split (type, name, bottom count, top count, ...): ncnn numbers layers this way."""
    return [ln.split() for ln in param.read_text(errors="replace").splitlines()[2:] if ln.split()]


def load_files(net: Any, param: Path, weights: Path) -> str | None:
    """Load ``param`` and ``weights`` into ``net``: None when ncnn takes them, else why in one line with what to
    do. An unknown layer type is named; any other refusal is ncnn's own words (its stderr) with the layer they
    point at: a Clip whose bound pnnx left as a second input (ncnn's Clip takes one: "one_blob_only layer 4"), a
    constant pnnx wrote with a zero-size shape ("layer load_model 139 /head/Mul_output_0 failed")."""
    rc, said = _stderr_of(lambda: net.load_param(str(param)))
    if rc != 0:
        unknown = unknown_layers(param)
        if unknown:
            return f"ncnn has no layer for {', '.join(unknown[:8])} (left by pnnx)"
        return _refusal(param, param.name, said, f"load_param returned {rc}",
                        "make that node's extra inputs constants in the ONNX model")
    rc, said = _stderr_of(lambda: net.load_model(str(weights)))
    if rc != 0:
        return _refusal(param, f"the weights {weights.name}", said, f"load_model returned {rc}",
                        "fix its input shapes and simplify it first (onnx-studio optimize MODEL --passes "
                        "fix-input-shapes,onnxsim --dim NAME=VALUE -o simple.onnx): pnnx then writes no such constant")
    return None


def _refusal(param: Path, what: str, said: str, fallback: str, rewrite: str) -> str:
    """One line: ncnn's last words, the ``.param`` layer they number (type, name, inputs; a constant's shape
    parameters), and what to do."""
    lines = _layer_lines(param)
    words = next((ln.strip() for ln in reversed(said.splitlines()) if ln.strip()), "")
    found = re.search(r"\blayer (?:load_model )?(\d+)\b", words)
    where = ""
    if found and int(found.group(1)) < len(lines) and len(lines[int(found.group(1))]) >= 4:
        kind, name, bottoms, tops, *params = lines[int(found.group(1))]
        if "one_blob_only" in words and bottoms != "1":
            where = f": {kind} {name!r} has {bottoms} input(s), ncnn's {kind} takes 1"
        elif kind == "MemoryData":     # its parameters after the blob names: 0=w 1=h 11=d 2=c
            axes = {"0": "w", "1": "h", "11": "d", "2": "c"}
            dims = [f"{axes[k]}={v}" for k, _, v in (t.partition("=") for t in params[int(bottoms) + int(tops):])
                    if k in axes]
            zero = " (a zero-size axis)" if any(d.endswith("=0") for d in dims) else ""
            where = f": the constant {name!r}, shape {' '.join(dims) or 'none'}{zero}"
        else:
            where = f": {kind} {name!r}, {bottoms} input(s), {tops} output(s)"
    return f"ncnn cannot load {what} ({words[:160] or fallback}){where}; use another engine, or {rewrite}"


def convert_to_ncnn(onnx_path: str | Path, out_dir: Path, shapes: Mapping[str, tuple[int, ...]],
                    precision: str = "f32", *, timeout_s: float = PNNX_TIMEOUT_S) -> dict[str, Any]:
    """Run pnnx in a child process on a link to ``onnx_path`` inside a temporary folder (the
    worker's scratch), removed afterwards; leave ``model.ncnn.param``/``.bin``/``.json`` in
    ``out_dir``; raise :class:`ConversionFailed`."""
    import shutil
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="pnnx-"))
    try:
        return _convert_in(Path(onnx_path).resolve(), Path(out_dir), shapes, precision, work, timeout_s)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # scratch: the temporary folder made above


def _convert_in(onnx_path: Path, out_dir: Path, shapes: Mapping[str, tuple[int, ...]], precision: str, work: Path,
                timeout_s: float) -> dict[str, Any]:
    import onnx

    _link_model(onnx_path, work)
    model = onnx.load_model(str(onnx_path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    outputs = [o.name for o in model.graph.output]
    missing = [i.name for i in inputs if i.name not in shapes]
    if missing:
        raise ConversionFailed(f"pnnx converts at fixed shapes: no shape for input(s) {', '.join(missing[:5])}",
                               {"ok": False, "error": "no input shapes", "command": [], "unsupported_ops": []})
    spec = [(tuple(shapes[i.name]), _DTYPES.get(i.type.tensor_type.elem_type, "f32")) for i in inputs]
    cmd = pnnx_command("model.onnx", spec, precision)
    refused = pnnx_input_problem(inputs)
    if refused:
        raise ConversionFailed(refused, {"ok": False, "error": refused, "command": cmd, "unsupported_ops": []})
    exe = pnnx_binary()
    info: dict[str, Any] = {"ok": False, "command": cmd, "converter_version": package_version("pnnx"),
                            "unsupported_ops": [], "shapes": {k: list(v) for k, v in shapes.items()}}
    if exe is None:
        info["error"] = "pnnx is not installed (pip install --no-deps pnnx)"
        raise ConversionFailed(info["error"], info)
    started = time.perf_counter()
    try:
        proc = subprocess.run([str(exe), *cmd[1:]], cwd=work, capture_output=True, text=True, errors="replace",
                              timeout=timeout_s, check=False)
        log, rc = (proc.stdout or "") + (proc.stderr or ""), proc.returncode
    except subprocess.TimeoutExpired as exc:
        log, rc = str(exc.stdout or "")[-4000:], None
    info.update(seconds=round(time.perf_counter() - started, 4), log=log[-4000:])
    param, bin_ = work / "model.ncnn.param", work / "model.ncnn.bin"
    if rc is None:
        info["error"] = f"pnnx did not finish within {timeout_s:.0f} s"
    elif rc < 0:
        info["error"] = (f"pnnx crashed on this model ({_signal_name(-rc)}{_stage(log)}){_last_line(log, True)}; "
                         "ncnn cannot take this model through pnnx: use another engine")
    elif rc != 0:
        info["error"] = f"pnnx refused the model (exit {rc})" + _last_line(log)
    elif not param.is_file() or not bin_.is_file():
        info["error"] = f"pnnx wrote no ncnn model (exit {rc})" + _last_line(log)
    else:
        unknown = unknown_layers(param)
        if unknown:
            info["unsupported_ops"] = [_PNNX_TO_ONNX.get(t, t) for t in unknown]
            info["error"] = f"ncnn has no layer for {', '.join(unknown[:8])} (left by pnnx)"
        else:       # a file ncnn refuses is no conversion: say which layer at the conversion, not at the run
            import ncnn

            refused = load_files(ncnn.Net(), param, bin_)
            if refused:
                info["error"] = refused
    if "error" in info:
        raise ConversionFailed(info["error"], info)
    script = work / "model_ncnn.py"
    io = _io_map(script.read_text(errors="replace") if script.is_file() else "", [i.name for i in inputs], outputs)
    for src, dst in ((param, "model.ncnn.param"), (bin_, "model.ncnn.bin")):
        os.replace(src, out_dir / dst)  # scratch: the conversion worker's own job folder
    (out_dir / IO_FILE).write_text(json.dumps(io))  # scratch: the conversion worker's own job folder
    info.update(ok=True, io=io)
    return info


def pnnx_input_problem(inputs: list[Any]) -> str | None:
    """An input pnnx has no inputshape for, in one line (None when all are fine): a bool tensor ("unsupported
    tensor elem data type 9") or a scalar ("[]" reads as no tensor at all, "[1]" is refused as not [])."""
    for i in inputs:
        t = i.type.tensor_type
        if t.elem_type == 9:
            return (f"pnnx (ncnn's converter) cannot take the bool input '{i.name[:60]}': it has no bool tensor type; "
                    "make the input another dtype (a Cast inside the graph) or use another engine")
        if t.HasField("shape") and not t.shape.dim:
            return (f"pnnx (ncnn's converter) cannot take the scalar (rank-0) input '{i.name[:60]}': its inputshape "
                    "has no form for a scalar; make it a 1-element tensor or use another engine")
    return None


def _signal_name(number: int) -> str:
    import signal

    try:
        return f"signal {number}, {signal.Signals(number).name}"
    except ValueError:
        return f"signal {number}"


def _stage(log: str) -> str:
    """The pass pnnx was in (its ``############# pass_ncnn`` banners), as ' in pass_ncnn'; '' when none."""
    stages = re.findall(r"^#{3,}\s*(\S[^#\n]*?)\s*$", log, re.M)
    return f" in {stages[-1][:60]}" if stages else ""


def _last_line(log: str, errors_only: bool = False) -> str:
    """The log's gist: its last line that says what failed (its end: pnnx prefixes C++ signatures); pnnx's op
    tables (box-drawing borders and rows) say nothing about a failure. ``errors_only``: '' when no line names an
    error (a crash's last line is a pass's timing or the op table, not its cause)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not ln.startswith("#")
             and not re.match(r"^[\u2500-\u257f]", ln.strip())]
    bad = [ln for ln in lines if re.search(r"unsupported|not supported|failed|error", ln, re.I)]
    line = (bad or ([] if errors_only else lines) or [""])[-1]
    return f": {'...' + line[-200:] if len(line) > 200 else line}" if line else ""


def _static_shapes(model: Any, names: list[str]) -> dict[str, tuple[int, ...]] | None:
    out = {}
    for i in model.graph.input:
        if i.name in names:
            dims = [d.dim_value if d.HasField("dim_value") else 0 for d in i.type.tensor_type.shape.dim]
            if any(d <= 0 for d in dims):
                return None
            out[i.name] = tuple(dims)
    return out


class NcnnRunner(ConvertedRunner):
    """pnnx once per input-shape set (in :meth:`prepare`, or the first inference), one ``ncnn.Net``,
    many inferences; a ``.ncnn.param`` the studio exported loads directly (``model.ncnn.json``
    beside it maps the blobs to the ONNX names)."""

    engine = "ncnn"

    def __init__(self, path: str, args: Mapping[str, Any], ctx: JobContext) -> None:
        started = time.perf_counter()
        import ncnn
        import onnx

        self._import_ms = elapsed_ms(started)
        self._ncnn = ncnn
        self.ctx = ctx
        self.precision = str(args.get("precision") or "f32")
        if self.precision not in ("f32", "f16", "default"):
            raise ValueError(f"ncnn runs f32 or f16 here, not {self.precision!r}")
        self.threads = int(args.get("intra_op_threads") or ctx.cpu_threads or default_cpu_threads())
        self.details: dict[str, Any] = {"engine_version": getattr(ncnn, "__version__", None)
                                        or package_version("ncnn"), "threads": self.threads,
                                        "precision_requested": self.precision, "outputs_mapped": "by order"}
        self.net: Any = None
        self._key: tuple | None = None
        source = Path(path)
        onnx_path = args.get("onnx_path") if source.name.endswith(".param") else str(source)
        self.onnx_path = Path(onnx_path) if onnx_path else None
        self.onnx_types: dict[str, int] = {}
        self.declared: dict[str, list[int]] = {}
        if self.onnx_path is not None:
            model = onnx.load_model(str(self.onnx_path), load_external_data=False)
            inits = {i.name for i in model.graph.initializer}
            self.input_names = [i.name for i in model.graph.input if i.name not in inits]
            self.output_names = [o.name for o in model.graph.output]
            self.onnx_types = onnx_output_types(self.onnx_path)
            self.declared = {o.name: [d.dim_value if d.HasField("dim_value") else -1
                                      for d in o.type.tensor_type.shape.dim] for o in model.graph.output}
            shapes = {n: tuple(s) for n, s in (args.get("input_shapes") or {}).items()} or \
                _static_shapes(model, self.input_names)
        if source.name.endswith(".param"):
            io_file = source.with_name(IO_FILE)
            self.io = json.loads(io_file.read_text()) if io_file.is_file() else None
            self._load(source, source.with_name(source.name[: -len(".param")] + ".bin"))
            if self.io is None:
                self.io = {"inputs": [[b, b, 0] for b in self.net.input_names()],
                           "outputs": [[b, b, 0] for b in self.net.output_names()]}
            if self.onnx_path is None:
                self.input_names = [n for n, _, _ in self.io["inputs"]]
                self.output_names = [n for n, _, _ in self.io["outputs"]]
            self._key = ("loaded",)
        elif shapes and set(shapes) >= set(self.input_names):
            self._convert({n: tuple(shapes[n]) for n in self.input_names})

    @property
    def effective_precision(self) -> str | None:
        if self.precision != "f16":
            return "f32"
        arm_fp16 = bool(getattr(self._ncnn, "cpu_support_arm_asimdhp", lambda: 0)())
        return "f16 storage and arithmetic" if arm_fp16 else "f16 storage, fp32 compute"

    def _load(self, param: Path, bin_: Path) -> None:
        ncnn = self._ncnn
        self.ctx.set_stage("ncnn load")
        started = time.perf_counter()
        net = ncnn.Net()
        f16 = self.precision == "f16"
        net.opt.use_vulkan_compute = False
        net.opt.use_fp16_storage = f16
        net.opt.use_fp16_packed = f16
        net.opt.use_fp16_arithmetic = f16
        net.opt.use_bf16_storage = False
        net.opt.num_threads = self.threads
        refused = load_files(net, param, bin_)
        if refused:
            raise ValueError(refused)
        self.net = net
        self.details["load_ms"] = round(elapsed_ms(started), 3)

    def _convert(self, shapes: dict[str, tuple[int, ...]]) -> None:
        key = tuple(sorted(shapes.items()))
        if key == self._key:
            return
        self.ctx.set_stage("ncnn conversion (pnnx)")
        started = time.perf_counter()
        folder = Path(self.ctx.scratch) / f"ncnn{abs(hash(key)) % 10**8}"
        folder.mkdir(parents=True, exist_ok=True)
        conv = convert_to_ncnn(self.onnx_path, folder, shapes, self.precision)
        self.record_conversion(conv, elapsed_ms(started))
        self.io = conv["io"]
        self._load(folder / "model.ncnn.param", folder / "model.ncnn.bin")
        self.details["session_ms"] = round(elapsed_ms(started), 3)
        self._key = key
        self.ctx.set_stage("ncnn inference")

    def prepare(self, feeds: Mapping[str, Any]) -> None:
        """Convert for these feed shapes (once per shape set) before anything is timed."""
        if self._key != ("loaded",):
            require_feeds(self.input_names, feeds)
            self._convert({n: tuple(int(d) for d in np.shape(feeds[n])) for n in self.input_names})

    def _mats(self, feeds: Mapping[str, Any]) -> list[tuple[str, Any]]:
        ncnn = self._ncnn
        self.prepare(feeds)
        mats = []
        for name, blob, batch in self.io["inputs"]:
            a = np.asarray(feeds[name])
            a = np.ascontiguousarray(a.astype(np.int32 if a.dtype.kind in "iub" else np.float32, copy=False))
            # clone: a Mat made from an array only borrows its memory
            mats.append((blob, ncnn.Mat(a, batch_index=_batch_index(batch)).clone()))
        return mats

    def _run(self, mats: list[tuple[str, Any]]) -> dict[str, np.ndarray]:
        with self.net.create_extractor() as ex:
            for blob, mat in mats:
                ex.input(blob, mat)
            got = {}
            for name, blob, batch in self.io["outputs"]:
                rc, mat = ex.extract(blob)
                if rc != 0:
                    raise ValueError(f"ncnn computed no value for output {name!r} (extract returned {rc})")
                fmt = "i" if self.onnx_types.get(name) in _INTEGER_TYPES else ""
                got[name] = np.array(mat.numpy(fmt, batch_index=_batch_index(batch)), copy=True)
        return got

    def _shaped(self, name: str, a: np.ndarray) -> np.ndarray:
        """ncnn keeps at most 4 axes and drops some of size 1: the ONNX output's rank again."""
        want = self.declared.get(name)
        if not want or len(want) == a.ndim:
            return a
        known = [d for d in want if d > 0]
        if want.count(-1) <= 1 and int(np.prod(known or [1])) and a.size % int(np.prod(known or [1])) == 0:
            try:
                return a.reshape(want)
            except ValueError:
                pass
        while a.ndim < len(want):
            a = a[np.newaxis]
        return a

    def infer(self, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        require_feeds(self.input_names, feeds)
        got = self._run(self._mats(feeds))
        wanted = names or self.output_names
        require_outputs(wanted, got)
        return {n: onnx_typed(self._shaped(n, got[n]), self.onnx_types.get(n)) for n in wanted}

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], dict[str, np.ndarray]]:
        """One inference on ``feeds`` made into ncnn Mats once (the profilers' timing loop)."""
        return functools.partial(self._run, self._mats(feeds))

    def close(self) -> None:
        self.net = None


@job("ncnn.convert")
def ncnn_convert_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    ctx.set_stage("ncnn conversion (pnnx)")
    shapes = {k: tuple(int(d) for d in v) for k, v in dict(args["shapes"]).items()}
    return conversion_output(lambda: convert_to_ncnn(str(args["model_path"]), Path(ctx.out_dir), shapes,
                                                     str(args.get("precision") or "f32")))
