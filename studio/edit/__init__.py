"""Model edits as data (DESIGN.md §13): a script of checked operations applied on an onnx-ir model
whose untouched weights stay on disk, checked (full checker, strict shape inference), verified
against the original, and written only then."""

from studio.edit.run import EditResult, edit, part_paths, provenance, validate
from studio.edit.script import EditError, EditScript, load_script, parse_ops, parse_text

__all__ = ["EditError", "EditResult", "EditScript", "edit", "load_script", "parse_ops", "parse_text", "part_paths",
           "provenance", "validate"]
