"""Every field of a dataset's preprocessing recipe as a widget, plus the model's
suggestion with its reason, a recipe-file upload and download, and a preview of the
samples after preprocessing (thumbnails and per-channel min/max/mean), so a user
sees -123..151 against -2.1..2.6 before anything runs on the data.

Widget values live under keys ``rcp_<field>_<dataset id>``; loading a suggestion, a
preset or a file fills them in a callback (before the widgets are drawn).
"""

from __future__ import annotations

import json
import math

import pandas as pd
import streamlit as st

from studio import api
from studio.core.requests import RECIPE_FIELDS, RecipeRequest
from studio.ui import widgets

TEXT_FIELDS = ("size", "scale", "mean", "std", "pad_value", "crop_ratio")
CHOICE_FIELDS = ("resize", "color", "layout", "dtype", "interpolation")
LABELS = {"resize": "Resize", "size": "Size HxW (empty: the model's)", "scale": "Scale", "mean": "Mean",
          "std": "Std", "color": "Colour order", "layout": "Layout", "dtype": "Dtype",
          "interpolation": "Interpolation", "pad_value": "Pad value", "crop_ratio": "Crop ratio"}


def _key(field: str, ds_id: str) -> str:
    return f"rcp_{field}_{ds_id}"


def _num(v: float) -> str:
    return "1/255" if math.isclose(v, 1 / 255) else f"{v:.10g}"


def field_texts(recipe) -> dict[str, str]:
    """The recipe's fields as the widgets show them."""
    return {"resize": recipe.resize, "size": f"{recipe.size[0]}x{recipe.size[1]}" if recipe.size else "",
            "scale": _num(recipe.scale), "mean": ",".join(_num(v) for v in recipe.mean),
            "std": ",".join(_num(v) for v in recipe.std), "color": recipe.color, "layout": recipe.layout,
            "dtype": recipe.dtype, "interpolation": recipe.interpolation, "pad_value": _num(recipe.pad_value),
            "crop_ratio": _num(recipe.crop_ratio)}


def _fill(ds_id: str, recipe) -> None:
    for field, text in field_texts(recipe).items():
        st.session_state[_key(field, ds_id)] = text


def _fill_preset(ds_id: str) -> None:
    name = st.session_state.get(_key("preset", ds_id))
    if name and name != "custom":
        _fill(ds_id, api.preprocessing_recipe(file=name))


def _fill_upload(ds_id: str) -> None:
    up = st.session_state.get(_key("upload", ds_id))
    st.session_state.pop(_key("upload_error", ds_id), None)
    if up is None:
        return
    try:
        _fill(ds_id, api.recipe_from_json(up.getvalue().decode("utf-8", errors="replace"),
                                          f"recipe file {widgets.plain(up.name, 60)}"))
    except Exception as exc:  # noqa: BLE001 - shown as one line below the uploader
        st.session_state[_key("upload_error", ds_id)] = str(exc)


def widget_request(ds_id: str) -> RecipeRequest:
    """The ``data recipe`` request the widgets give, each field as typed (an empty size is left out: the CLI
    has no flag for "the model's"). The editor hands it to ``api.preprocessing_recipe`` and its hint prints it."""
    return RecipeRequest(fields={f: str(st.session_state.get(_key(f, ds_id), "")) for f in RECIPE_FIELDS})


def _fields(recipe) -> dict:
    return {k: v for k, v in recipe.to_dict().items() if k != "preset"}


def edit(ds, handle, project_id: str) -> object | None:
    """Draw the editor for an image dataset; returns the recipe the widgets give (None if invalid)."""
    choices = api.recipe_choices()
    saved = ds.recipe or api.preprocessing_recipe()
    if _key("resize", ds.id) not in st.session_state:
        _fill(ds.id, saved)
    suggestion = widgets.guarded(lambda: api.suggest_preprocessing(handle)) if handle is not None else None
    st.markdown("**Preprocessing**")
    st.caption("Saved: " + widgets.md_escape(saved.describe(), 200))
    st.caption("Why: " + widgets.md_escape(ds.recipe_reason or "-", 400))
    if suggestion is not None:
        st.caption("The model suggests: " + widgets.md_escape(f"{suggestion[0].describe()} — {suggestion[1]}", 600))
    c = st.columns([1, 1, 1])
    c[0].selectbox("Start from a preset", ["custom", *choices["preset"]], key=_key("preset", ds.id),
                   on_change=_fill_preset, args=(ds.id,),
                   help="Fills the fields below with a preset; every field stays editable")
    if suggestion is not None:
        c[1].button("Use the model's suggestion", key=_key("suggest", ds.id), on_click=_fill,
                    args=(ds.id, suggestion[0]))
    c[2].button("Reset to saved", key=_key("reset", ds.id), on_click=_fill, args=(ds.id, saved))
    help_of = api.recipe_fields()
    row = st.columns(len(CHOICE_FIELDS))
    for col, field in zip(row, CHOICE_FIELDS):
        options = list(choices[field])
        if st.session_state.get(_key(field, ds.id)) not in options:
            st.session_state[_key(field, ds.id)] = options[0]
        col.selectbox(LABELS[field], options, key=_key(field, ds.id), help=help_of[field])
    row = st.columns(len(TEXT_FIELDS))
    for col, field in zip(row, TEXT_FIELDS):
        col.text_input(LABELS[field], key=_key(field, ds.id), help=help_of[field])
    edited = None
    try:
        request = widget_request(ds.id)
        edited = api.preprocessing_recipe(changes=request)
    except Exception as exc:  # noqa: BLE001 - a bad field is shown as one line, the page goes on
        widgets.show_error(exc)
    up_col, down_col, save_col = st.columns([2, 1, 1])
    up_col.file_uploader("Load a recipe file (.json)", type=["json"], key=_key("upload", ds.id),
                         on_change=_fill_upload, args=(ds.id,))
    if st.session_state.get(_key("upload_error", ds.id)):
        st.error(widgets.md_escape(st.session_state[_key("upload_error", ds.id)], 400), icon="🚫")
    if edited is not None:
        down_col.download_button("Download as a recipe file", json.dumps(edited.to_dict(), indent=1),
                                 file_name=f"{widgets.plain(ds.name, 60)}.recipe.json", mime="application/json",
                                 key=_key("download", ds.id))
    changed = edited is not None and (ds.recipe is None or _fields(edited) != _fields(ds.recipe))
    if save_col.button("Save the recipe", key=_key("save", ds.id), disabled=not changed, type="primary"):
        new = widgets.guarded(lambda: api.set_dataset_recipe(ds, edited, reason="set on the Data page"))
        if new is not None:
            st.session_state.pop("data_report", None)
            st.rerun()
    if changed:
        st.caption("Unsaved changes: the preview below uses them; evaluations use the saved recipe.")
    if edited is not None:
        widgets.cli_hint(request.command(ds.name, project=project_id))
    return edited


def preview(ds, handle, recipe=None) -> None:
    """Thumbnails and per-channel value ranges of the first samples after preprocessing."""
    shown = api.dataset_with_recipe(ds, recipe) if recipe is not None and ds.kind == "image" else ds
    samples = widgets.guarded(lambda: api.preview_dataset_samples(shown, handle, count=4), spinner="Preprocessing…")
    if not samples:
        return
    st.markdown("**As the model gets them**")
    cols = st.columns(len(samples))
    for col, s in zip(cols, samples):
        if s.picture is not None:
            col.image(s.picture, clamp=True)
        col.caption(widgets.md_escape(f"{s.input}: {s.dtype}{list(s.shape)} {s.layout}", 120))
        col.caption(widgets.md_escape(s.ranges_text(), 200))
    rows = [{"sample": s.index, "file": widgets.plain(s.file, 60), "input": widgets.plain(s.input, 40),
             "channel": c.channel, "min": round(c.min, 4), "max": round(c.max, 4), "mean": round(c.mean, 4)}
            for s in samples for c in s.channels]
    if rows:
        widgets.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
