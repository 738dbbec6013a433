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
from studio.core.fmt import printable


def model_dims(args: argparse.Namespace) -> dict[str, int]:
    """The dims this run uses: ``--dim`` over the project's stored setting (the result is stored)."""
    given = parse_dims(getattr(args, "dim", None))
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
