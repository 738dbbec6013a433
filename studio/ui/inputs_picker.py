"""The inputs a run uses, picked the same way on every page that runs models:
seeded random sets, an uploaded .npz of input values, uploaded images, or one of the
project's datasets (then task metrics judge the run). Uploads are saved once (per
upload) into the session's workspace."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from studio import api
from studio.ui import state, widgets


@dataclass(frozen=True)
class InputsChoice:
    inputs: Path | None        # an .npz
    images: Path | None        # a folder of images
    count: int
    cli_options: tuple = ()    # the equivalent CLI options, (flag, value) pairs: a request's command(extra=)
    ready: bool = True         # False while a file kind is chosen but nothing is uploaded yet
    dataset: object = None     # a studio.data.datasets.Dataset of the project, when picked

    def settings(self) -> dict:
        """What of this choice decides a run's result (part of the result's key, ``state.keep_result``)."""
        return {"inputs": str(self.inputs) if self.inputs else None, "images": str(self.images) if self.images else None,
                "count": self.count, "dataset": getattr(self.dataset, "id", None)}


def _saved(key: str, files, save) -> Path | None:
    """Save an upload once; the path is remembered per upload identity."""
    if not files:
        return None
    ident = tuple((f.name, f.size, f.file_id) for f in (files if isinstance(files, list) else [files]))
    memo = st.session_state.get(key)
    if memo and memo[0] == ident:
        return memo[1]
    path = widgets.guarded(lambda: save(files, state.workspace().job_dir("inputs")))
    if path is not None:
        st.session_state[key] = (ident, path)
    return path


def inputs_picker(key: str, *, images_label: str = "Images", count_label: str = "Random input sets",
                  default_count: int = 2, npz_flag: str = "--inputs", images_flag: str = "--images",
                  with_count: bool = True) -> InputsChoice:
    """``with_count=False``: the run uses one input set (profiling): no count box."""
    kinds = ["Random (seeded)", "Input values (.npz)", images_label]
    project = state.project()
    datasets = widgets.guarded(lambda: api.project_datasets(project)) if project is not None else None
    if datasets:
        kinds.append("Dataset")
    kind = st.radio("Inputs", kinds, horizontal=True, key=f"{key}_kind")
    if kind == "Dataset" and datasets:
        names = {d.id: d.name for d in datasets}
        did = st.selectbox("Dataset (see the Data page)", list(names), format_func=names.__getitem__,
                           key=f"{key}_dataset")
        ds = widgets.guarded(lambda: api.dataset(project, did))
        if ds is None:
            return InputsChoice(None, None, 1, ready=False)
        return InputsChoice(None, None, max(len(ds.evaluation), 1),
                            (("--project", project.id), ("--dataset", ds.name)), dataset=ds)
    if kind == kinds[1]:
        up = st.file_uploader(".npz with one array per input name (NAME/0, NAME/1... for several samples)",
                              type=["npz"], key=f"{key}_npz")
        path = _saved(f"{key}_npz_saved", up, lambda f, folder: api.save_npz_upload(f.getvalue(), folder))
        return InputsChoice(path, None, 1, ((npz_flag, "inputs.npz" if path else None),), ready=path is not None)
    if kind == kinds[2]:
        ups = st.file_uploader("Images (.png/.jpg/.bmp/.ppm); resized to the model's input, ImageNet "
                               "normalization", type=["png", "jpg", "jpeg", "bmp", "ppm"],
                               accept_multiple_files=True, key=f"{key}_images")
        folder = _saved(f"{key}_images_saved", ups,
                        lambda fs, d: api.save_image_uploads([(f.name, f.getvalue()) for f in fs], d))
        count = len(ups or [])
        return InputsChoice(None, folder, max(count, 1), ((images_flag, "images/" if folder else None),),
                            ready=folder is not None)
    if not with_count:
        return InputsChoice(None, None, 1)
    count = int(st.number_input(count_label, min_value=1, max_value=64, value=default_count, key=f"{key}_count"))
    return InputsChoice(None, None, count, (("--count", count if count != 2 else None),))
