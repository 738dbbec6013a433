"""A user's OpenVINO IR (``.xml`` + ``.bin``), checked in the parent before any worker reads it.

Why here and not in OpenVINO: an IR is user input like an ONNX file. OpenVINO's reader, handed a
``.bin`` shorter than the ``.xml`` declares, reads past it or fails with a multi-line C++ message
inside the worker; a document type declaration could expand entities. So the parent parses the
``.xml`` with the standard library (a DTD or entity is refused outright: no real IR carries one),
checks the ``.bin`` lies beside it as a plain file and holds every constant the ``.xml`` points at
(``offset + size``), and reads the model's input and output tensor names, so the IR can be bound to
the ONNX model it came from (its decoder contract, its output order) the way ``RunOptions.source_model``
binds a ``.mnn`` / ``.tflite``. Every failure is one :class:`StudioError` line naming the file and the fix.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError

__all__ = ["IrFile", "check_ir_matches", "read_ir"]

MAX_XML_BYTES = 512 * 2**20          # a 70B model's IR .xml is tens of MB


@dataclass(frozen=True)
class IrFile:
    """An IR checked on disk: its files, the tensor names of its inputs and outputs, the .bin's size."""

    xml: Path
    bin: Path
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    bin_bytes: int
    version: str


def _bad(xml: Path, what: str, fix: str) -> StudioError:
    return StudioError(f"OpenVINO IR {xml.name[:80]}: {what}; {fix}", code=ErrorCode.BAD_IR)


def _names(port: ET.Element | None) -> list[str]:
    text = port.get("names", "") if port is not None else ""
    return [n.strip() for n in text.split(",") if n.strip()]


def read_ir(path: str | Path) -> IrFile:
    """The IR at ``path`` checked (see module docs), or one StudioError line."""
    xml = Path(path)
    if xml.suffix.lower() != ".xml":
        raise _bad(xml, "not an .xml file", "give the IR's .xml (its .bin lies beside it)")
    if not xml.is_file() or xml.is_symlink():
        raise _bad(xml, "no such file (or a link)", "give the path of the IR's .xml")
    binary = xml.with_suffix(".bin")
    if not binary.is_file() or binary.is_symlink():
        raise _bad(xml, f"its weights {binary.name[:80]} are missing (or a link)",
                   "keep the .bin beside the .xml under the same name")
    size = xml.stat().st_size
    if size > MAX_XML_BYTES:
        raise _bad(xml, f"the .xml is {size / 2**20:.0f} MiB (over {MAX_XML_BYTES // 2**20} MiB)", "is it an IR?")
    raw = xml.read_bytes()
    if b"<!DOCTYPE" in raw or b"<!ENTITY" in raw:
        raise _bad(xml, "the .xml declares a document type or entities, which no IR does", "give an IR OpenVINO wrote")
    try:
        root = ET.fromstring(raw)
    except ET.ParseError as exc:
        raise _bad(xml, f"not well-formed XML ({str(exc)[:80]})", "give an IR OpenVINO wrote") from None
    layers = root.find("layers")
    if root.tag != "net" or layers is None:
        raise _bad(xml, "not an OpenVINO IR (no <net> with <layers>)", "give the .xml that ov.save_model wrote")
    bin_bytes = binary.stat().st_size
    inputs: list[str] = []
    outputs: list[str] = []
    result_ids: set[str] = set()
    ports: dict[tuple[str, str], list[str]] = {}
    for layer in layers.iter("layer"):
        kind, lid = layer.get("type"), str(layer.get("id"))
        out = layer.find("output")
        for port in (out.findall("port") if out is not None else []):
            ports[(lid, str(port.get("id")))] = _names(port)
        data = layer.find("data")
        if kind == "Const" and data is not None and data.get("offset") is not None:
            try:
                end = int(data.get("offset", "0")) + int(data.get("size", "0"))
            except ValueError:
                raise _bad(xml, f"constant {layer.get('name', '?')[:60]} has a bad offset/size",
                           "give an IR OpenVINO wrote") from None
            if end > bin_bytes:
                raise _bad(xml, f"{binary.name[:60]} is {bin_bytes} bytes but constant "
                                f"{layer.get('name', '?')[:60]} ends at byte {end} (truncated, or another model's .bin)",
                           "copy the .bin again beside its .xml")
        elif kind == "Parameter":
            first = out.find("port") if out is not None else None
            inputs.extend(_names(first)[:1] or [str(layer.get("name"))])
        elif kind == "Result":
            result_ids.add(lid)
            if layer.get("output_names"):
                outputs.extend(n.strip() for n in str(layer.get("output_names")).split(",")[:1])
    if not outputs and result_ids:        # older IRs: the names are on the port feeding each Result
        edges = root.find("edges")
        for edge in (edges.iter("edge") if edges is not None else []):
            if edge.get("to-layer") in result_ids:
                outputs.extend(ports.get((str(edge.get("from-layer")), str(edge.get("from-port"))), [])[:1])
    if not inputs or not outputs:
        raise _bad(xml, "it has no Parameter or no Result layer", "give the .xml of a whole model")
    return IrFile(xml, binary, tuple(inputs), tuple(outputs), bin_bytes, str(root.get("version", "?")))


def check_ir_matches(ir: IrFile, inputs: Iterable[str], outputs: Iterable[str], source: str) -> None:
    """The IR holds the ``inputs`` and ``outputs`` its source ONNX model ``source`` is run by (names a
    weight compression keeps), else one StudioError line naming the first one missing."""
    for kind, wanted, have in (("input", inputs, ir.inputs), ("output", outputs, ir.outputs)):
        missing = [n for n in wanted if n not in have]
        if missing:
            raise _bad(ir.xml, f"has no {kind} {missing[0][:60]!r}, which {source[:60]} has "
                               f"({len(missing)} missing)", f"give an IR converted from {source[:60]}")
