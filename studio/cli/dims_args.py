"""The model's dims setting on the command line: ``--dim NAME=VALUE`` (repeatable; INPUT[AXIS]=VALUE
for an unnamed dim). With ``--project`` the values are stored as the model's dims -- the same
setting the Overview page writes -- and a later run that gives none uses the stored ones, so
inspect, check, optimize and export all see the sizes the user chose once."""

from __future__ import annotations

import argparse
import sys

from studio import api
from studio.cli.common import parse_dims
from studio.cli.project_args import kept
from studio.core.errors import StudioError
from studio.core.fmt import printable


def model_dims(args: argparse.Namespace) -> dict[str, int]:
    """The dims this run uses: ``--dim`` over the project's stored setting (the result is stored)."""
    given = parse_dims(getattr(args, "dim", None))
    warn_unknown_dims(getattr(args, "model", None), given)
    run = kept(args)
    if run is None:
        return given
    stored = {k: int(v) for k, v in (api.get_settings(run.project, run.model.id).get("dims") or {}).items()}
    merged = {**stored, **given}
    if given and merged != stored:
        api.set_setting(run.project, "dims", merged, model_id=run.model.id)
    elif stored and not given:
        shown = ", ".join(f"{k}={v}" for k, v in stored.items())
        print(f"dims       from the project: {printable(shown, 200)}", file=sys.stderr)
    return merged


def warn_unknown_dims(model: str | None, given: dict[str, int]) -> None:
    """A ``--dim`` the model has no free dim for (a typo: ``image_widht``) is said on stderr, once, with the
    dims it has; the run goes on (the value is unused)."""
    if not given or not model:
        return
    try:
        handle = api.load(model)
    except StudioError:
        return                              # the command itself says what is wrong with the file
    keys = api.input_dim_keys(handle)
    inputs = {i.name for i in handle.proto.graph.input}
    # Every dim name the inputs declare, derived ones too ("past_sequence_length + sequence_length"): a value
    # given for a derived dim is checked (and refused, when it disagrees) by the command itself, not a typo.
    declared = {d.dim_param for i in handle.proto.graph.input if i.type.HasField("tensor_type")
                for d in i.type.tensor_type.shape.dim if d.dim_param}
    for name in given:
        bracket = name.endswith("]") and "[" in name and name.split("[", 1)[0] in inputs
        if name in keys or name in declared or bracket:
            continue
        shown = ", ".join(printable(k, 60) for k in keys[:20]) + (" ..." if len(keys) > 20 else "")
        print(f"warning: dim '{printable(name, 60)}' is not a dim of this model; known: {shown or 'none'}",
              file=sys.stderr)
