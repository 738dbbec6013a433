"""Every ``code`` a :class:`studio.core.errors.StudioError` carries, in one enum, with what the user
should do about it. The values are the strings the CLI's ``--json`` and the UI have always shown
(``ErrorCode`` is a ``StrEnum``: a member *is* its string). ``docs/errors.md`` is rendered from
this table (``python -m studio.core.error_codes > docs/errors.md``); tests/core/test_error_codes.py
checks that every code raised in the source is here and that the page is current."""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """A StudioError's stable code (its value is what ``--json`` prints)."""

    # input the user gave: options, paths, files, names
    BAD_OPTION = "BAD-OPTION"
    BAD_INPUT = "BAD-INPUT"
    BAD_PATH = "BAD-PATH"
    BAD_CONFIG = "BAD-CONFIG"
    BAD_DIM = "BAD-DIM"
    BAD_FEEDS = "BAD-FEEDS"
    BAD_NPY = "BAD-NPY"
    BAD_NAME = "BAD-NAME"
    BAD_REQUEST = "BAD-REQUEST"
    BAD_TARGET = "BAD-TARGET"
    BAD_OP = "BAD-OP"
    BAD_IMPL = "BAD-IMPL"
    BAD_EDIT = "BAD-EDIT"
    BAD_IR = "BAD-IR"
    OUT_OF_RANGE = "OUT-OF-RANGE"
    NOT_FOUND = "NOT-FOUND"
    EXISTS = "EXISTS"
    TOO_LARGE = "TOO-LARGE"
    READ_ONLY = "READ-ONLY"
    UNREADABLE = "UNREADABLE"
    UNKNOWN_ENGINE = "UNKNOWN-ENGINE"
    UNKNOWN_PASS = "UNKNOWN-PASS"
    UNKNOWN_PRESET = "UNKNOWN-PRESET"
    # the model file
    LOAD_ERROR = "LOAD-ERROR"
    UNSAFE_MODEL = "UNSAFE-MODEL"
    INVALID_MODEL = "INVALID-MODEL"
    UNSUPPORTED_MODEL = "UNSUPPORTED-MODEL"
    UNSUPPORTED_OP = "UNSUPPORTED-OP"
    UNSUPPORTED = "UNSUPPORTED"
    NO_MODEL = "NO-MODEL"
    NO_NODE = "NO-NODE"
    NO_GROUP = "NO-GROUP"
    NO_OVERLAY = "NO-OVERLAY"
    # engines, workers and tools
    ENGINE_UNAVAILABLE = "ENGINE-UNAVAILABLE"
    WORKER_ERROR = "WORKER-ERROR"
    TIMEOUT = "TIMEOUT"
    MEMORY = "MEMORY"
    USER_CODE = "USER-CODE"
    MISSING_DEPENDENCY = "MISSING-DEPENDENCY"
    PASS_UNAVAILABLE = "PASS-UNAVAILABLE"
    NO_DOT = "NO-DOT"
    DOT_FAILED = "DOT-FAILED"
    DOT_TIMEOUT = "DOT-TIMEOUT"
    NSYS_MISSING = "NSYS-MISSING"
    NSYS_FAILED = "NSYS-FAILED"
    SHARED_MODE = "SHARED-MODE"
    # transformations and their verification
    CONVERT_FAILED = "CONVERT-FAILED"
    FUSION_FAILED = "FUSION-FAILED"
    NOTHING_TO_FUSE = "NOTHING-TO-FUSE"
    NOTHING_TO_QUANTIZE = "NOTHING-TO-QUANTIZE"
    QUANTIZE_FAILED = "QUANTIZE-FAILED"
    INT8_ACCURACY = "INT8-ACCURACY"
    NNCF_FAILED = "NNCF-FAILED"
    NO_RESULT = "NO-RESULT"
    NO_FIX = "NO-FIX"
    FIX_FAILED = "FIX-FAILED"
    FIX_NOOP = "FIX-NOOP"
    REFERENCE_FAILED = "REFERENCE-FAILED"
    # decoders: cache, feeds, generation, merging
    NOT_A_DECODER = "NOT-A-DECODER"
    DECODER_NONE = "DECODER-NONE"
    DECODER_CACHE_MISMATCH = "DECODER-CACHE-MISMATCH"
    DECODER_CACHE_SHAPE = "DECODER-CACHE-SHAPE"
    DECODER_FEEDS = "DECODER-FEEDS"
    DECODER_MASK = "DECODER-MASK"
    DECODER_POSITIONS = "DECODER-POSITIONS"
    DECODER_TOKENS = "DECODER-TOKENS"
    GENERATE_CONTEXT = "GENERATE-CONTEXT"
    GENERATE_NO_PAST = "GENERATE-NO-PAST"
    GENERATE_NOT_DECODER = "GENERATE-NOT-DECODER"
    GENERATE_UNKNOWN_INPUT = "GENERATE-UNKNOWN-INPUT"
    GENERATE_VOCAB = "GENERATE-VOCAB"
    MERGE_ALREADY = "MERGE-ALREADY"
    MERGE_EXPORTS = "MERGE-EXPORTS"
    MERGE_EXTERNAL = "MERGE-EXTERNAL"
    MERGE_INPUTS = "MERGE-INPUTS"
    MERGE_INVALID = "MERGE-INVALID"
    MERGE_MISMATCH = "MERGE-MISMATCH"
    MERGE_NOT_DECODER = "MERGE-NOT-DECODER"
    MERGE_OPSET = "MERGE-OPSET"
    MERGE_OUTPUTS = "MERGE-OUTPUTS"
    MERGE_ROLES = "MERGE-ROLES"
    # projects and their catalog
    NO_PROJECT = "NO-PROJECT"
    AMBIGUOUS_PROJECT = "AMBIGUOUS-PROJECT"
    NOT_A_PROJECT = "NOT-A-PROJECT"
    NO_VERSION = "NO-VERSION"
    SAME_CONTENT = "SAME-CONTENT"
    WRONG_SOURCE = "WRONG-SOURCE"
    BAD_CATALOG = "BAD-CATALOG"
    CATALOG_BUSY = "CATALOG-BUSY"
    CATALOG_WRITE = "CATALOG-WRITE"
    STORE_MISMATCH = "STORE-MISMATCH"
    ARTIFACT_OUTSIDE = "ARTIFACT-OUTSIDE"
    PATH_IN_PROJECTS = "PATH-IN-PROJECTS"
    # batch and remote targets
    NO_CLUSTER = "NO-CLUSTER"
    NO_TARGET = "NO-TARGET"
    WORKER_LOST = "WORKER-LOST"
    SCHEDULER_LOST = "SCHEDULER-LOST"
    REMOTE = "REMOTE"
    HASH_MISMATCH = "HASH-MISMATCH"
    # export
    TRITON_DTYPE = "TRITON-DTYPE"
    TRTEXEC_NAME = "TRTEXEC-NAME"
    # the base class's code: an error no subclass names more precisely
    STUDIO_ERROR = "STUDIO-ERROR"


# What the user should do, per code (the message itself names the problem and the value at fault).
WHAT_TO_DO: dict[ErrorCode, str] = {
    ErrorCode.BAD_OPTION: "An option's value is not accepted (unknown name, out of its range, wrong form). Correct "
                          "the option the message names; `onnx-studio <command> --help` lists the valid values.",
    ErrorCode.BAD_INPUT: "An input given for a run (an .npz, a dataset sample, a dim) does not fit the model, or the "
                         "model lacks what the operation needs. Give inputs with the names, dtypes and shapes the "
                         "message names, or choose a model the operation applies to.",
    ErrorCode.BAD_PATH: "A path is not acceptable (missing, a device or FIFO, a folder where a file is needed, or "
                        "outside the allowed root). Give a regular file or folder you own, inside the project or "
                        "output folder.",
    ErrorCode.BAD_CONFIG: "An environment variable or configuration value (worker limits, timeouts) is malformed. "
                          "Fix or unset the variable the message names.",
    ErrorCode.BAD_DIM: "A `--dim` value contradicts the model (a derived dim given another value, or not positive). "
                       "Give the dims the message lists, consistent with each other.",
    ErrorCode.BAD_FEEDS: "Feeds passed to a run are not a name -> array mapping the model accepts. Pass arrays keyed "
                         "by the model's input names.",
    ErrorCode.BAD_NPY: "A .npy/.npz file has a header that cannot be read safely (object arrays, huge or negative "
                       "shapes, truncated). Save it again with numpy.save/savez from plain numeric arrays.",
    ErrorCode.BAD_NAME: "A project, model, dataset or version name is empty or unusable. Give a short name of "
                        "letters, digits, '-', '_' or '.'.",
    ErrorCode.BAD_REQUEST: "A request object and separate fields were given together, or a request is incomplete. "
                           "Give either the request or its fields.",
    ErrorCode.BAD_TARGET: "The chosen target (plugin target, export target, remote target) is not one this "
                          "operation supports. Use one of the targets the message lists.",
    ErrorCode.BAD_OP: "The custom op is not named as DOMAIN::OP_TYPE or is not in the model. Name an op the model "
                      "uses, e.g. mmdeploy::grid_sampler.",
    ErrorCode.BAD_IMPL: "A plugin's Python implementation is too large, not valid Python or lacks the function it "
                        "must define. Fix the implementation file as the message says.",
    ErrorCode.BAD_EDIT: "A graph edit cannot be applied (unknown node or tensor, a cut that leaves no output, a "
                        "rename clash). Change the edit as the message says; the model is unchanged.",
    ErrorCode.BAD_IR: "An OpenVINO IR pair (.xml/.bin) is incomplete or unreadable. Give the .xml with its .bin "
                      "beside it, as OpenVINO wrote them.",
    ErrorCode.OUT_OF_RANGE: "A number is outside the range the studio accepts. Give a value inside the bounds the "
                            "message names.",
    ErrorCode.NOT_FOUND: "A named file, dataset or item does not exist. Check the name or path (it may have been "
                         "moved or deleted).",
    ErrorCode.EXISTS: "The name is taken (a dataset, model or file of that name exists). Choose another name, or "
                      "remove the existing one first.",
    ErrorCode.TOO_LARGE: "The file, archive or result is larger than the studio handles in this place. Use the CLI "
                         "for it, or a smaller input, as the message suggests.",
    ErrorCode.READ_ONLY: "The folder cannot be written (permissions, a read-only mount, a full disk). Choose a "
                         "writable folder or free space.",
    ErrorCode.UNREADABLE: "A project file cannot be read. Check the permissions and the mount of the projects root.",
    ErrorCode.UNKNOWN_ENGINE: "The engine name is not known. Use one of the engines the message lists (aliases such "
                              "as ort, ov, trt are accepted).",
    ErrorCode.UNKNOWN_PASS: "The optimization pass is not known. `onnx-studio optimize --list` lists the passes.",
    ErrorCode.UNKNOWN_PRESET: "The preset is not known. Use one of the presets the message lists.",
    ErrorCode.LOAD_ERROR: "The file is not a loadable ONNX model (empty, truncated, another format). Export the "
                          "model again, or open the .onnx file rather than its folder or weights.",
    ErrorCode.UNSAFE_MODEL: "The model points outside its folder (external data paths) or declares impossible sizes. "
                            "Keep the external data files beside the model, with relative names.",
    ErrorCode.INVALID_MODEL: "The model fails onnx.checker, so the operation would not be meaningful. Fix or "
                             "re-export the model (the check page names the problem).",
    ErrorCode.UNSUPPORTED_MODEL: "The model cannot be read by the library the operation needs (e.g. onnx-ir). "
                                 "Re-export it with a standard opset, or use another operation.",
    ErrorCode.UNSUPPORTED_OP: "An op in the model is not supported by the engine used. Run `onnx-studio check` for "
                              "the engines that run it, or apply the fix it proposes.",
    ErrorCode.UNSUPPORTED: "The operation does not support this engine or configuration. Use one the message names.",
    ErrorCode.NO_MODEL: "No model is open. Upload or open one on the Overview page first.",
    ErrorCode.NO_NODE: "No node has that id or name. Pick a node from the graph or `onnx-studio inspect --json`.",
    ErrorCode.NO_GROUP: "The graph group is not in this model (the hierarchy changed). Reload the graph view.",
    ErrorCode.NO_OVERLAY: "The overlay is not available for this model. Use one the message lists.",
    ErrorCode.ENGINE_UNAVAILABLE: "The engine is not installed or cannot run here. Install it as the message says "
                                  "(`pip install ...`), or choose another engine.",
    ErrorCode.WORKER_ERROR: "The isolated worker running the job crashed, timed out, ran out of memory or raised. "
                            "Raise --timeout / --memory-gb if the model needs more, or report the model: the "
                            "engine failed on it.",
    ErrorCode.TIMEOUT: "A user script (data loader) did not finish in time and was stopped. Make it finish faster "
                       "or raise the worker time limit.",
    ErrorCode.MEMORY: "A user script (data loader) exceeded the worker memory limit. Load less at once or raise "
                      "the memory limit.",
    ErrorCode.USER_CODE: "A user script (data loader) raised. Fix the script; the message is its error.",
    ErrorCode.MISSING_DEPENDENCY: "An optional package the operation needs is missing. Install it with the pip "
                                  "command in the message.",
    ErrorCode.PASS_UNAVAILABLE: "A pass the operation needs is not available in this build. Install the optional "
                                "dependencies of that pass, or choose another precision/target.",
    ErrorCode.NO_DOT: "Graphviz `dot` is not installed. Install graphviz (apt-get install graphviz).",
    ErrorCode.DOT_FAILED: "Graphviz `dot` failed on the drawing. Draw a smaller region (--focus/--hops) or a lower "
                          "--level.",
    ErrorCode.DOT_TIMEOUT: "Graphviz `dot` took too long. Draw a smaller region (--focus/--hops) or a lower --level.",
    ErrorCode.NSYS_MISSING: "Nsight Systems (`nsys`) is not on PATH. Install it, or run the printed commands on a "
                            "GPU machine.",
    ErrorCode.NSYS_FAILED: "The `nsys` run failed. Read its output tail in the message; run the printed command by "
                           "hand on the GPU machine.",
    ErrorCode.SHARED_MODE: "The action is off on a shared server (it would run code on the server). Run it with the "
                           "CLI on your own machine.",
    ErrorCode.CONVERT_FAILED: "The ONNX version converter could not convert the opset. The model is unchanged; "
                              "re-export it at the opset you need.",
    ErrorCode.FUSION_FAILED: "onnxruntime's transformer optimizer failed on this model. Turn the fusion off as the "
                             "message says.",
    ErrorCode.NOTHING_TO_FUSE: "The transformer optimizer found nothing to fuse. Use fuse=off for this model.",
    ErrorCode.NOTHING_TO_QUANTIZE: "The model has nothing the quantizer applies to (already quantized, no MatMul "
                                   "weights). Choose another precision, or keep the model as it is.",
    ErrorCode.QUANTIZE_FAILED: "INT8 quantization for export failed. Read the reason; try the dynamic INT8 variant "
                               "or another precision.",
    ErrorCode.INT8_ACCURACY: "No INT8 configuration reaches the requested accuracy on held-out inputs. Lower the "
                             "target, give more representative calibration data, or keep FP16/FP32.",
    ErrorCode.NNCF_FAILED: "NNCF weight compression failed on this model. Try another weight-only mode or precision.",
    ErrorCode.NO_RESULT: "The passes before export produced no model. Read their summary in the message; remove the "
                         "failing pass.",
    ErrorCode.NO_FIX: "No fix pass was named or the finding has none. Name a fix pass (e.g. legalize-grid-sampler).",
    ErrorCode.FIX_FAILED: "The fix pass was not applied (its verification failed). The model is unchanged; read the "
                          "summary in the message.",
    ErrorCode.FIX_NOOP: "The fix changed nothing in this version. The problem it fixes is not in this model.",
    ErrorCode.REFERENCE_FAILED: "The reference (the original model on ONNX Runtime's CPU) fails on the inputs a "
                                "result is judged on: a dataset sample, or sizes the studio guessed for free dims "
                                "(the fp16 pass). Check that sample's shapes and dtypes against the model's inputs, "
                                "or set the sizes with `--dim NAME=VALUE`.",
    ErrorCode.NOT_A_DECODER: "The model is not a KV-cache decoder (no past_key_values/present inputs and outputs). "
                             "Give the decoder model of the export.",
    ErrorCode.DECODER_NONE: "The model has no KV cache. Decoder options apply only to KV-cache decoders.",
    ErrorCode.DECODER_CACHE_MISMATCH: "The cache inputs and outputs do not pair up (names, layers or shapes). Give "
                                      "a decoder whose past_key_values.N and present.N match.",
    ErrorCode.DECODER_CACHE_SHAPE: "A cache tensor's shape is not the [batch, heads, length, head size] the decoder "
                                   "tools read. Give the shape with --dim, or a standard export.",
    ErrorCode.DECODER_FEEDS: "The given cache inputs disagree (past lengths differ between layers). Give every "
                             "layer's past with the same length.",
    ErrorCode.DECODER_MASK: "The attention mask's length does not match the past plus the new tokens. Give a mask "
                            "that covers both.",
    ErrorCode.DECODER_POSITIONS: "The position ids' length does not match the tokens given. Give one position per "
                                 "new token.",
    ErrorCode.DECODER_TOKENS: "Token ids are outside the model's vocabulary. Give ids from the model's tokenizer.",
    ErrorCode.GENERATE_CONTEXT: "The generation would run past the model's context length. Ask for fewer new tokens "
                                "or a shorter prompt.",
    ErrorCode.GENERATE_NO_PAST: "The model writes a cache but reads none (the first model of a decoder pair). Give "
                                "the decoder with past, or merge the pair first (`onnx-studio merge-decoders`).",
    ErrorCode.GENERATE_NOT_DECODER: "The model cannot drive a generation loop (no token ids, no logits). Give a "
                                    "token decoder.",
    ErrorCode.GENERATE_UNKNOWN_INPUT: "The model has an input the generation loop has no value for. Give a decoder "
                                      "with the standard inputs (input_ids, attention_mask, position_ids, past).",
    ErrorCode.GENERATE_VOCAB: "The vocabulary size cannot be read from the graph. Give a decoder with a fixed logits "
                              "size or an embedding table.",
    ErrorCode.MERGE_ALREADY: "The models look merged already. Use the merged model as it is.",
    ErrorCode.MERGE_EXPORTS: "The decoder and the decoder with past come from different exports. Give the two "
                             "models of one export.",
    ErrorCode.MERGE_EXTERNAL: "Weights are still in external data. Load the models with their weights beside them.",
    ErrorCode.MERGE_INPUTS: "The two models' inputs do not match. Give the decoder and the decoder with past of one "
                            "export.",
    ErrorCode.MERGE_INVALID: "The merged model fails the ONNX checker; nothing was written. Report the pair.",
    ErrorCode.MERGE_MISMATCH: "The merged model differs from its parts on a test input; nothing was written. Report "
                              "the pair.",
    ErrorCode.MERGE_NOT_DECODER: "A model of the pair is not a KV-cache decoder. Give a decoder and its decoder with "
                                 "past.",
    ErrorCode.MERGE_OPSET: "The two models use different opsets. Convert one to the other's opset first.",
    ErrorCode.MERGE_OUTPUTS: "The two models' outputs do not match. Give the two models of one export.",
    ErrorCode.MERGE_ROLES: "Both models are the same kind. Give one decoder without past inputs and one with them.",
    ErrorCode.NO_PROJECT: "No project has that name or id. `onnx-studio projects list` lists them.",
    ErrorCode.AMBIGUOUS_PROJECT: "Several projects have that name. Use the project's id the message lists.",
    ErrorCode.NOT_A_PROJECT: "The archive is not an onnx-studio project. Import a zip made by `onnx-studio "
                             "projects export` or the Projects page.",
    ErrorCode.NO_VERSION: "The model has no version of that id. Pick one of the versions its history lists.",
    ErrorCode.SAME_CONTENT: "The new version would be identical to an existing one (the message names it). Nothing "
                            "to save: use that version.",
    ErrorCode.WRONG_SOURCE: "The result was computed on another model than the one it would be saved to. Run it "
                            "again on this model.",
    ErrorCode.BAD_CATALOG: "The project's catalog is damaged or points outside the project. Restore the project "
                           "from an archive or backup.",
    ErrorCode.CATALOG_BUSY: "Another process is writing the project's catalog. Wait for it to finish and retry.",
    ErrorCode.CATALOG_WRITE: "The project catalog cannot be written (full disk, a file-size limit); the change was "
                             "not saved. Free space and retry.",
    ErrorCode.STORE_MISMATCH: "The stored copy differs from its source (it changed while copying). Retry when the "
                              "file is no longer being written.",
    ErrorCode.ARTIFACT_OUTSIDE: "An artifact would lie outside its project folder; refused. Save it inside the "
                                "project.",
    ErrorCode.PATH_IN_PROJECTS: "That path is inside the projects folder. Open projects on the Projects page.",
    ErrorCode.NO_CLUSTER: "No scheduler answered at the cluster address (or the TLS files are missing). Start the "
                          "cluster or fix the address and certificates.",
    ErrorCode.NO_TARGET: "No worker of the cluster offers that target. Start a worker with that target, or choose "
                         "one the message lists.",
    ErrorCode.WORKER_LOST: "The remote worker did not finish the task. Check the worker on that target and retry.",
    ErrorCode.SCHEDULER_LOST: "The cluster's scheduler went away and did not come back in time. Restart the "
                              "scheduler (its workers rejoin) and run the batch again: finished tasks are kept.",
    ErrorCode.REMOTE: "The remote target reported an error without a code of its own. Read the message; run the "
                      "same command locally to see the error in full.",
    ErrorCode.HASH_MISMATCH: "The model's content does not match the task's hash (it changed in transit or on "
                             "disk). Send the task again.",
    ErrorCode.TRITON_DTYPE: "An input or output has a dtype Triton cannot express. Cast it in the model, or export "
                            "for another server.",
    ErrorCode.TRTEXEC_NAME: "An input name cannot be written in a trtexec command line. Use the generated "
                            "build_engine.py instead.",
    ErrorCode.STUDIO_ERROR: "A problem the message describes; it names what to do.",
}


def render_markdown() -> str:
    """docs/errors.md: every code, in the enum's order, with what to do."""
    lines = ["# Error codes", "",
             "Every error the studio reports (CLI `error: ...` lines, `--json` `code` fields, the pages) carries one "
             "of these codes. The message names the problem and the value at fault; this page says what to do.",
             "Generated from `studio/core/error_codes.py` (`python -m studio.core.error_codes > docs/errors.md`).",
             "", "| code | what to do |", "|---|---|"]
    lines += [f"| `{code.value}` | {WHAT_TO_DO[code]} |" for code in ErrorCode]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")
