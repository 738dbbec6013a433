"""Every engine, declared once (DESIGN.md section 15): one plain-data row per engine.

The factory (:func:`studio.core.engines.get_engine`), the runner table
(:data:`studio.core.engines.sessions.RUNNERS`), the worker job allowlist
(:data:`studio.core.jobs.BUILTIN_JOBS`), the adapters' own names (``WorkerEngine``), the CLI's
engine choices, the pages' labels and ``api.engines()`` are all derived from :data:`ENGINES`.
Capability code (checks, export, per-op profiling, layer-wise comparison) reads the row's facts
(``kind``, ``fuses_ops``, ``channels_last``, ``converter``...) instead of comparing engine names.

This module is data only: it imports nothing of the studio, and names code as "module:attr"
strings, resolved where they are used (the factory, the runner factory, the job resolver), so
``studio.core.jobs`` can read it without importing any engine.

Adding an engine: its adapter module (adapter class, runner, convert job) and a row here; its one-shot
runs are the shared ``engine.run`` job (:data:`RUN_JOB`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ENGINES", "RUN_JOB", "EngineRow", "alias_map", "engine_jobs", "engine_row", "engine_rows", "names"]

_ENG = "studio.core.engines"

# The one-shot run job of every engine with a runner (args["engine"] names the row): it lives beside the
# runner factory, never in an engine module, because the factory imports the engine modules by name.
RUN_JOB = "engine.run"
_RUN_JOB_TARGET = f"{_ENG}.sessions:engine_run_job"


@dataclass(frozen=True)
class EngineRow:
    """One engine. ``kind``: "native" reads ONNX itself, "converted" runs a converter's file
    (its check is a real conversion and run, its outputs are mapped back to ONNX names),
    "table" is judged from a support table where it cannot run (TensorRT without a GPU)."""

    name: str                              # canonical: "onnxruntime"
    label: str                             # what pages and messages call it: "ONNX Runtime"
    aliases: tuple[str, ...]               # other names a user may type
    kind: str                              # "native" | "converted" | "table"
    precisions: tuple[str, ...]            # RunOptions.precision values it computes in here
    fuses_ops: bool                        # its own graph merges ONNX nodes (layer-wise matches by name only)
    suffix: str                            # the file it runs: ".onnx", ".mnn", ".tflite", ".ncnn.param"
    install: str                           # one line: how to get it
    module: str = ""                       # Python module whose presence (package metadata) says installed
    adapter: str = ""                      # "module:Class" of its EngineAdapter
    runner: str = ""                       # "module:Class" of its runner (the one runner protocol)
    jobs: tuple[tuple[str, str], ...] = ()  # its own jobs (probe, convert): (job name, "module:function")
    info_job: str = ""                     # its probe job (version, devices), "" when none
    pool: str = ""                         # suffix of its warm-worker pool (heavy or clashing imports)
    limits: str = ""                       # "module:function" adjusting a job's Limits (converter needs)
    converter: str = ""                    # converted engines: the converter's name in messages
    code: str = ""                         # prefix of its finding codes: "MNN-UNSUPPORTED"
    channels_last: bool = False            # its file computes in NHWC (layout handled before comparing)
    export_label: str = ""                 # the export target's label (converted engines export their file)
    notes: tuple[str, ...] = field(default=())   # limits a user should know, one line each
    cli: str = ""                          # the name command hints spell ("ort", "trt"); default: the name
    default_check: bool = True             # `check` with no --engines includes it (converted: where installed)
    process_thread_pool: bool = False      # one CPU thread pool per process, sized by the first model opened

    @property
    def short(self) -> str:
        """The name command hints spell (``ort``, ``trt``; the name itself otherwise)."""
        return self.cli or self.name

    @property
    def run_job(self) -> str:
        """The job that runs its file once (:data:`RUN_JOB`, with ``args["engine"]``); "" without a runner."""
        return RUN_JOB if self.runner else ""

    @property
    def converted(self) -> bool:
        return self.kind == "converted"

    def to_dict(self) -> dict:
        """The row as plain JSON (``api.engines()``, ``onnx-studio engines --json``)."""
        return {"name": self.name, "label": self.label, "aliases": list(self.aliases), "cli": self.short,
                "kind": self.kind,
                "precisions": list(self.precisions), "fuses_ops": self.fuses_ops, "suffix": self.suffix,
                "install": self.install, "pool": self.pool, "converter": self.converter,
                "channels_last": self.channels_last, "export_label": self.export_label, "notes": list(self.notes),
                "default_check": self.default_check, "process_thread_pool": self.process_thread_pool}


ENGINES: tuple[EngineRow, ...] = (
    EngineRow("onnxruntime", "ONNX Runtime", ("ort", "onnx-runtime", "onnx_runtime"), "native",
              ("f32",), False, ".onnx", "pip install onnxruntime", module="onnxruntime",
              adapter=f"{_ENG}.onnxruntime:OnnxRuntimeEngine", runner=f"{_ENG}.onnxruntime:OrtRunner",
              jobs=(("ort.info", f"{_ENG}.onnxruntime:ort_info_job"),),
              info_job="ort.info", code="ORT", cli="ort"),
    EngineRow("openvino", "OpenVINO", ("ov",), "native", ("f32", "bf16", "f16", "default"), True, ".xml",
              "pip install openvino", module="openvino",
              adapter=f"{_ENG}.openvino:OpenVinoEngine", runner=f"{_ENG}.openvino:OvRunner",
              jobs=(("ov.info", f"{_ENG}.openvino:ov_info_job"),),
              info_job="ov.info", code="OV"),
    EngineRow("tensorrt", "TensorRT", ("trt",), "table", ("f32", "f16", "bf16"), True, ".plan",
              "pip install tensorrt (needs an NVIDIA GPU)",
              adapter=f"{_ENG}.tensorrt:TensorRtEngine", runner=f"{_ENG}.tensorrt:TrtRunner",
              code="TRT", cli="trt",
              notes=("checked from its support table where no GPU is present",)),
    EngineRow("mnn", "MNN", (), "converted", ("f32", "f16", "int8"), True, ".mnn", "pip install MNN",
              module="MNN", adapter=f"{_ENG}.mnn:MnnEngine", runner=f"{_ENG}.mnn:MnnRunner",
              jobs=(("mnn.convert", f"{_ENG}.mnn:mnn_convert_job"),
                    ("mnn.quantize", f"{_ENG}.mnn_quant:mnn_quantize_job")),
              pool=":mnn", converter="MNNConvert", code="MNN", export_label="MNN (.mnn)",
              notes=("integer tensors computed in int32",), process_thread_pool=True),
    EngineRow("litert", "LiteRT", ("tflite", "lite-rt"), "converted", ("f32", "f16", "int8"), True, ".tflite",
              "pip install ai-edge-litert", module="ai_edge_litert",
              adapter=f"{_ENG}.litert:LiteRtEngine", runner=f"{_ENG}.litert:LiteRtRunner",
              jobs=(("litert.convert", f"{_ENG}.litert:litert_convert_job"),),
              pool=":litert", limits=f"{_ENG}.litert:litert_limits", converter="onnx2tf", code="LITERT",
              channels_last=True, export_label="LiteRT (.tflite)",
              notes=("converted at fixed input shapes (NHWC)", "onnx2tf imports TensorFlow: several GiB")),
    EngineRow("ncnn", "ncnn", (), "converted", ("f32", "f16"), True, ".ncnn.param",
              "pip install ncnn; pip install --no-deps pnnx (the converter binary; its torch dependency is "
              "not needed for ONNX)", module="ncnn",
              adapter=f"{_ENG}.ncnn:NcnnEngine", runner=f"{_ENG}.ncnn:NcnnRunner",
              jobs=(("ncnn.convert", f"{_ENG}.ncnn:ncnn_convert_job"),),
              pool=":ncnn", converter="pnnx", code="NCNN", export_label="ncnn (.param/.bin)",
              default_check=False,      # opt-in (--engines ncnn / all): the default check's output stays as it was
              notes=("converted by pnnx at fixed input shapes", "CPU only here (no Vulkan)")),
)


# The engine a reference output comes from where the user named none (memory's input search; compare's "A").
REFERENCE_ENGINE = "onnxruntime"


def names() -> tuple[str, ...]:
    """Canonical engine names, in table order."""
    return tuple(r.name for r in ENGINES)


def engine_rows(kind: str | None = None) -> tuple[EngineRow, ...]:
    return tuple(r for r in ENGINES if kind is None or r.kind == kind)


def alias_map() -> dict[str, str]:
    """Every accepted spelling (lower case) -> canonical name."""
    out: dict[str, str] = {}
    for r in ENGINES:
        for key in (r.name, *r.aliases):
            out[key.lower()] = r.name
    return out


def engine_row(name: str) -> EngineRow | None:
    """The row of a canonical name or alias; None when no engine is called so."""
    canonical = alias_map().get(str(name).strip().lower())
    return next((r for r in ENGINES if r.name == canonical), None)


def engine_jobs() -> dict[str, str]:
    """Every engine's worker jobs: name -> "module:function" (the job allowlist's engine part)."""
    return {RUN_JOB: _RUN_JOB_TARGET, **{job: target for r in ENGINES for job, target in r.jobs}}
