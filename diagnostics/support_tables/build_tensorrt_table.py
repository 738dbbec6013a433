"""Build the versioned TensorRT and ONNX Runtime CUDA support tables (JSON) from
the transcribed source facts beside this script.

    python -m diagnostics.support_tables.build_tensorrt_table          # write
    python -m diagnostics.support_tables.build_tensorrt_table --check  # committed JSON is up to date

Inputs (``*.psv``, pipe-separated, with ``@key value`` headers and ``#`` comments
that name their origin):

* ``tensorrt_10.x_operators.psv`` -- onnx-tensorrt's docs/operators.md (10.x);
* ``tensorrt_11.x_changes.psv``   -- 10.x plus the changes TensorRT 11 documents;
* ``ort_cuda_kernels.psv``        -- ONNX Runtime's OperatorKernels.md, CUDA EP section.

Outputs: ``tensorrt_10.json``, ``tensorrt_11.json``, ``ort_cuda.json``. Free-text
TensorRT restrictions become structured checks (``RESTRICTION_RULES``) that
``diagnostics.tensorrt_check`` evaluates on each node; text no rule understands
is kept and reported as a note.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

TYPE_NAMES = {
    "FP32": "float", "FLOAT32": "float", "FP16": "float16", "FLOAT16": "float16", "BF16": "bfloat16",
    "BFLOAT16": "bfloat16", "INT32": "int32", "INT64": "int64", "INT8": "int8", "UINT8": "uint8",
    "BOOL": "bool", "FP8": "float8e4m3fn", "FP4": "float4e2m1", "INT4": "int4", "DOUBLE": "double",
}

# (regex over the restriction text, structured checks). Checks are evaluated per node:
#   input_rank: the first input's rank must be in "ranks"
#   const_input: input "index" (named "name") must be an initializer/constant
#   const_input_max: ... and every value < "max"
#   const_input_zero: ... and all zero
#   attr_in: attribute "attr" (default "default") must be one of "values"
#   attr_all_ones: attribute "attr" must be absent/empty or all ones
#   max_outputs: at most "count" outputs may be used
RESTRICTION_RULES: list[tuple[str, list[dict]]] = [
    (r"2D or 3D (pooling|convolutions|deconvolutions) only",
     [{"kind": "input_rank", "ranks": [4, 5], "text": "2-D or 3-D only (input rank 4 or 5)"}]),
    (r"input must be 4D", [{"kind": "input_rank", "ranks": [4], "text": "input must be 4-D"}]),
    (r"dilations must be empty or all ones",
     [{"kind": "attr_all_ones", "attr": "dilations", "text": "dilations must be empty or all ones"}]),
    (r"Indices output unsupported", [{"kind": "max_outputs", "count": 1, "text": "the Indices output is unsupported"}]),
    (r"only the first output Y is supported",
     [{"kind": "max_outputs", "count": 1, "text": "only the first output (Y) is supported"}]),
    (r"axes must be an initializer",
     [{"kind": "const_input", "index": 1, "name": "axes", "text": "axes must be an initializer"}]),
    (r"axes must be resolvable to a constant",
     [{"kind": "const_input", "index": 1, "name": "axes", "text": "axes must be a constant"}]),
    (r"axis must be a build-time constant",
     [{"kind": "const_input", "index": 1, "name": "axis", "text": "axis must be a build-time constant"}]),
    (r"depth must be a build-time constant",
     [{"kind": "const_input", "index": 1, "name": "depth", "text": "depth must be a build-time constant"}]),
    (r"K must be less than 3840",
     [{"kind": "const_input_max", "index": 1, "name": "K", "max": 3840, "text": "K must be less than 3840"}]),
    (r"sorted must be 1", [{"kind": "attr_in", "attr": "sorted", "default": 1, "values": [1],
                            "text": "sorted must be 1"}]),
    (r"x_zero_point must be zero",
     [{"kind": "const_input_zero", "index": 2, "name": "x_zero_point", "text": "x_zero_point must be zero"}]),
    (r"y_zero_point must be 0",
     [{"kind": "const_input_zero", "index": 2, "name": "y_zero_point", "text": "y_zero_point must be zero"}]),
    (r"reduction other than none", [{"kind": "attr_in", "attr": "reduction", "default": "none", "values": ["none"],
                                     "text": "reduction must be none"}]),
    (r"input_forget must be 0", [{"kind": "attr_in", "attr": "input_forget", "default": 0, "values": [0],
                                  "text": "input_forget must be 0"}]),
    (r"layout must be 0", [{"kind": "attr_in", "attr": "layout", "default": 0, "values": [0],
                            "text": "layout must be 0"}]),
    (r"is_training must be an initializer",
     [{"kind": "const_input_zero", "index": 2, "name": "training_mode", "optional": True,
       "text": "training_mode must be a constant False"}]),
    (r"frame_step and window must be an? initializers?",
     [{"kind": "const_input", "index": 1, "name": "frame_step", "text": "frame_step must be an initializer"}]),
    (r"antialiasing not supported",
     [{"kind": "attr_in", "attr": "antialias", "default": 0, "values": [0], "text": "antialias is not supported"},
      {"kind": "attr_in", "attr": "mode", "default": "nearest", "values": ["nearest", "linear"],
       "text": "mode must be nearest or linear"},
      {"kind": "attr_in", "attr": "keep_aspect_ratio_policy", "default": "stretch", "values": ["stretch"],
       "text": "keep_aspect_ratio_policy must be stretch"},
      {"kind": "attr_in", "attr": "coordinate_transformation_mode", "default": "half_pixel",
       "values": ["half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric", "align_corners"],
       "text": "unsupported coordinate_transformation_mode"}]),
    (r"sparse_value, value_string and value_strings attributes unsupported",
     [{"kind": "attr_absent", "attrs": ["sparse_value", "value_string", "value_strings"],
       "text": "sparse and string constants are unsupported"}]),
    (r"1D or 2D spatial dimensions", [{"kind": "input_rank", "ranks": [3, 4],
                                        "text": "input must have 1-D or 2-D spatial dims"}]),
    (r"Q, K, V and attn_mask must be 4D", [{"kind": "input_rank", "ranks": [4], "text": "Q must be 4-D"}]),
]


def read_psv(path: Path) -> tuple[dict[str, str], list[list[str]]]:
    headers: dict[str, str] = {}
    rows: list[list[str]] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):
            key, _, value = line[1:].partition(" ")
            headers[key] = value.strip()
            continue
        rows.append([c.strip() for c in line.split("|")])
    return headers, rows


def _types(text: str) -> list[str]:
    out = []
    for t in (x.strip().upper() for x in text.split(",")):
        if t and TYPE_NAMES.get(t) and TYPE_NAMES[t] not in out:
            out.append(TYPE_NAMES[t])
    return out


def _checks(restrictions: str) -> tuple[list[dict], bool]:
    checks: list[dict] = []
    for pattern, rule in RESTRICTION_RULES:
        if re.search(pattern, restrictions, re.IGNORECASE):
            checks.extend(rule)
    return checks, bool(checks)


def build_tensorrt(base: Path, changes: Path | None = None) -> dict:
    headers, rows = read_psv(base)
    ops: dict[str, dict] = {}
    for row in rows:
        op, supported, types, restrictions = (row + ["", "", "", ""])[:4]
        checks, _ = _checks(restrictions)
        ops[op] = {"supported": supported.upper().startswith("Y"), "types": _types(types),
                   "restrictions": restrictions, "checks": checks}
    table = {
        "engine": "tensorrt", "version": headers.get("version", "?"),
        "major": int(headers.get("version", "0").split(".")[0]),
        "opset_min": int(headers.get("opset_min", 9)), "opset_max": int(headers.get("opset_max", 0)),
        "note": headers.get("note", ""), "source": base.name, "removed_plugins": [], "ops": ops,
    }
    if changes is not None:
        ch_headers, ch_rows = read_psv(changes)
        for row in ch_rows:
            op, supported, types, restrictions = (row + ["", "", "", ""])[:4]
            checks, _ = _checks(restrictions)
            ops[op] = {"supported": supported.upper().startswith("Y"), "types": _types(types),
                       "restrictions": restrictions, "checks": checks}
        table["version"] = ch_headers.get("version", table["version"])
        table["major"] = int(table["version"].split(".")[0])
        table["note"] = ch_headers.get("note", table["note"])
        table["source"] = f"{base.name} + {changes.name}"
        table["removed_plugins"] = [p.strip() for p in ch_headers.get("removed_plugins", "").split(",") if p.strip()]
    table["ops"] = dict(sorted(ops.items()))
    return table


def build_ort_cuda(path: Path) -> dict:
    headers, rows = read_psv(path)
    kernels: dict[str, dict] = {}
    for row in rows:
        domain, op, since, until, types, note = (row + [""] * 6)[:6]
        extra: dict = {}
        for item in filter(None, (x.strip() for x in note.split(";"))):
            key, _, value = item.partition("=")
            extra[key.strip()] = value.strip()
        kernels[f"{'' if domain == 'ai.onnx' else domain}::{op}"] = {
            "since": int(since), "until": None if until == "+" else int(until),
            "types": [t.strip() for t in types.split(",") if t.strip()],
            "min_ort": extra.get("min_ort"), "rank": int(extra["rank"]) if "rank" in extra else None,
        }
    return {"engine": "onnxruntime", "provider": headers.get("ep", "CUDAExecutionProvider"),
            "source": path.name, "kernels": dict(sorted(kernels.items()))}


def outputs() -> dict[str, dict]:
    base = HERE / "tensorrt_10.x_operators.psv"
    return {
        "tensorrt_10.json": build_tensorrt(base),
        "tensorrt_11.json": build_tensorrt(base, HERE / "tensorrt_11.x_changes.psv"),
        "ort_cuda.json": build_ort_cuda(HERE / "ort_cuda_kernels.psv"),
    }


def _dump(table: dict) -> str:
    return json.dumps(table, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed JSON differs from a fresh build")
    args = parser.parse_args(argv)
    stale = []
    for name, table in outputs().items():
        target = HERE / name
        text = _dump(table)
        if args.check:
            if not target.is_file() or target.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {name}: {len(table.get('ops', table.get('kernels', {})))} entries")
    if stale:
        print(f"stale: {', '.join(stale)} (run python -m diagnostics.support_tables.build_tensorrt_table)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
