"""The model being edited and what the edits did so far (what the report and verification read)."""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir

from studio.edit.script import EditScript

# How an operation relates to the original's numbers (what verification can check):
KEEPS = "keeps"          # same values at the same (possibly renamed) outputs: numeric verification
STRUCTURE = "structure"  # the interface changes, tensors keep their values: reproduced from the original
VALUES = "values"        # values change on purpose (attributes, dtypes, weights): report only
SEQUENCE = "sequence"    # a merge: checked when applied against its two parts run in sequence
PINNED = "pinned"        # an input's free dims pinned to sizes: verified numerically at those sizes


@dataclass
class EditState:
    model: ir.Model
    script: EditScript
    renamed: dict[str, str] = field(default_factory=dict)   # current tensor name -> the original's name
    notes: list[str] = field(default_factory=list)          # one line per operation
    kinds: list[str] = field(default_factory=list)          # KEEPS / STRUCTURE / VALUES per operation
    extra: list[ir.Model] = field(default_factory=list)     # split: the second model
    verify: bool = True                                     # merges run their parts to check the join
    pool_key: str = "default"

    def record_rename(self, old: str, new: str) -> None:
        self.record_renames({old: new})

    def record_renames(self, pairs: dict[str, str]) -> None:
        """Several renames at once: a swap (a -> b, b -> a) maps each new name to its own original."""
        origins = {new: self.renamed.get(old, old) for old, new in pairs.items()}
        for old in pairs:
            self.renamed.pop(old, None)
        self.renamed.update(origins)

    def did(self, kind: str, note: str) -> None:
        self.kinds.append(kind)
        self.notes.append(note)
