"""The studio's error types: one line a user understands, plus a stable code.

Every failure that reaches a user (CLI, UI, JSON) is a ``StudioError``: the
message names the problem and what to do, never an absolute server path or a
stack trace. Library code raises these; the CLI and UI render ``str(err)``.
"""

from __future__ import annotations

import re

from studio.core.error_codes import ErrorCode


class StudioError(Exception):
    """A user-facing error with a stable machine-readable ``code`` (an :class:`ErrorCode`; docs/errors.md)."""

    code: str = ErrorCode.STUDIO_ERROR

    def __init__(self, message: str, *, code: str | None = None) -> None:
        # One line only: collapse newlines so a model-supplied string cannot
        # forge extra lines in logs or terminals.
        one_line = " ".join(str(message).split())
        super().__init__(one_line)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": str(self)}


class SameContentError(StudioError):
    """A new version would be byte-identical to one the model already has (R63): said as "same as vN"."""

    code = ErrorCode.SAME_CONTENT

    def __init__(self, message: str, *, version: str) -> None:
        super().__init__(message)
        self.version = version


class WrongSourceError(StudioError):
    """A result computed on one model's file offered as a version of another (R59): refused."""

    code = ErrorCode.WRONG_SOURCE


class ModelLoadError(StudioError):
    """The file is not a loadable ONNX model (empty, truncated, wrong format...)."""

    code = ErrorCode.LOAD_ERROR


class UnsafeModelError(ModelLoadError):
    """The model points outside its folder or declares impossible sizes."""

    code = ErrorCode.UNSAFE_MODEL


class PathError(StudioError):
    """A path given by a user is not acceptable (device, FIFO, outside root...)."""

    code = ErrorCode.BAD_PATH


class EngineUnavailable(StudioError):
    """An engine is not installed or cannot run here; the message says why."""

    code = ErrorCode.ENGINE_UNAVAILABLE


class WorkerError(StudioError):
    """A sandboxed job crashed, timed out, hit its memory limit or raised."""

    code = ErrorCode.WORKER_ERROR

    def __init__(self, message: str, *, kind: str = "error", stage: str = "job",
                 code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.kind = kind  # "crashed" | "timeout" | "memory" | "cancelled" | "error"
        self.stage = stage

    def to_dict(self) -> dict[str, str]:
        return {**super().to_dict(), "kind": self.kind, "stage": self.stage}


# Lines of an engine's message that say where in its C++ sources it failed, not what failed:
# OpenVINO puts one or more of them before the reason ("Exception from src/inference/...cpp:224:").
_SOURCE_LINE_PREFIXES = ("Exception from ", "Check '", "src/")
_EXCEPTION_PREFIX = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Failure): ")
# "Exception from src/plugins/intel_cpu/src/node.cpp:794:" inside a line that also says something.
_SOURCE_LOCATION = re.compile(r"Exception from \S+:\d+:\s*")


def engine_message(text: object, limit: int = 500) -> str:
    """One line of an engine's multi-line error that says what is wrong.

    Most messages lead with the reason and keep it. OpenVINO's lead with C++ source
    locations (``Exception from src/inference/src/cpp/infer_request.cpp:224:``): a first
    line like that says nothing, so the lines after it that are not locations are
    joined instead (``[CPU] AvgPool node ... Check 'cmp::le(kernel, ...)' failed``)."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return ""
    lines[0] = _ort_cause_first(lines[0])
    # "RuntimeError: Exception from src/...": the exception type stays, the location goes.
    kind = _EXCEPTION_PREFIX.match(lines[0])
    prefix = kind.group(0) if kind else ""
    lines[0] = lines[0][len(prefix):]
    if not lines[0].startswith(_SOURCE_LINE_PREFIXES):
        return (prefix + lines[0])[:limit]
    cleaned = [_SOURCE_LOCATION.sub("", ln).strip() for ln in lines]
    useful = [c for c in cleaned if c and not c.startswith(_SOURCE_LINE_PREFIXES)]
    return (prefix + (" ".join(useful) or lines[0]))[:limit]


# ONNX Runtime's status prefix, which says only the error class: "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ".
_ORT_STATUS = re.compile(r"\[ONNXRuntimeError\] : \d+ : [A-Z_]+ : ")


def ort_cause(text: object, limit: int = 500) -> str:
    """What failed in an ONNX Runtime error, for a note that has little room: :func:`engine_message`'s
    cause-first line less what precedes ORT's status prefix (the studio's stage, the exception type) and the
    prefix itself; a message without that prefix as :func:`engine_message` gives it."""
    line = engine_message(text, 100_000)
    status = _ORT_STATUS.search(line)
    return (line[status.end():] if status else line)[:limit]


# ONNX Runtime's run errors nest one "running <Op> node. Name:'<name>' Status Message: " per level (an If, then
# the Pad inside it) before the cause, which a shortened message then cut off.
_ORT_RUNNING = re.compile(r"(?:Non-zero status code returned while )?running (?P<op>[\w.]+) node\."
                          r"(?: Name:'(?P<name>[^']*)')? Status Message: ")


def _ort_cause_first(line: str) -> str:
    """ONNX Runtime's nested run error with its cause first and the nodes after it: '... INVALID_ARGUMENT :
    Pad reflect: post-pad (64) exceeds maximum allowed (15) for axis 1. (Pad node 'node_pad' in If node
    'node_cond__1')'; other text unchanged."""
    hits = list(_ORT_RUNNING.finditer(line))
    cause = line[hits[-1].end():].strip() if hits else ""
    if not cause:
        return line
    where = " in ".join(f"{h.group('op')} node '{h.group('name')}'" if h.group("name") else f"{h.group('op')} node"
                        for h in reversed(hits))
    return f"{line[:hits[0].start()]}{cause} ({where})"


def is_located(text: object) -> bool:
    """Does this engine message lead with C++ source locations (OpenVINO's style)?"""
    first = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    kind = _EXCEPTION_PREFIX.match(first)
    return first[len(kind.group(0)) if kind else 0:].startswith(_SOURCE_LINE_PREFIXES)
