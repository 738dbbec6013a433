"""The output-task picker and the target picker shared by the Data, Precision and Verify pages:
each output's inferred task with its reason, a choice the project keeps for the model, and only
the targets that apply to the outputs' tasks."""

from __future__ import annotations

import streamlit as st

from studio import api
from studio.ui import state, widgets

_AUTO = "auto"


def task_picker(handle, key: str) -> dict[str, str]:
    """Per output: the task (inferred, or the one the project keeps) and why, with a select to
    change it; a change is stored in the project. Returns the {output: kind} choices to pass on."""
    project = state.project()
    stored = api.stored_output_tasks(project, handle) if project is not None else {}
    inferred = {t.output: t for t in api.output_tasks(handle)}
    decided = {t.output: t for t in api.output_tasks(handle, stored)}
    label = ", ".join(f"{n[:24]}: {t.kind}" for n, t in list(decided.items())[:3])
    with st.expander(f"Output tasks ({widgets.md_escape(label, 120)})", expanded=False):
        st.caption("How each output is judged. Inferred from the graph (the op producing it, its shape, its name); "
                   "change it when the studio is wrong: the project keeps the choice for this model.")
        changes: dict[str, str | None] = {}
        options = [_AUTO, *api.output_task_kinds()]
        for i, (name, t) in enumerate(decided.items()):
            auto = inferred[name].kind
            pick = st.selectbox(widgets.md_escape(name, 80), options,
                                index=options.index(stored[name]) if name in stored else 0,
                                format_func=lambda k, a=auto: f"auto ({a})" if k == _AUTO else k,
                                key=f"{key}_task_{i}")
            st.caption(widgets.md_escape(t.reason, 300))
            if (pick == _AUTO and name in stored) or (pick != _AUTO and stored.get(name) != pick):
                changes[name] = None if pick == _AUTO else pick
        if changes and project is not None:
            if widgets.guarded(lambda: api.set_output_tasks(project, handle, changes)) is not None:
                stored = api.stored_output_tasks(project, handle)
    return stored


def target_picker(handle, tasks: dict[str, str], key: str, *, label: str = "Task-metric target") -> str:
    """A target among the metrics that apply to the outputs' tasks ("" for none), e.g. top1-agreement>=0.99."""
    metrics = list(api.task_targets(handle, tasks))
    if not metrics:
        st.caption("No task metric applies to this model's outputs.")
        return ""
    c1, c2 = st.columns([2, 1])
    options = ["", *metrics]
    preferred = next((m for m in ("top1-agreement", "map-drop", "mask-iou", "recall@1", "cer", "mismatch-rate")
                      if m in metrics), "")
    metric = c1.selectbox(label, options, index=options.index(preferred), key=f"{key}_metric",
                          format_func=lambda m: m or "none",
                          help="Only the metrics of the outputs' tasks are offered (set a task above to change them)")
    if not metric:
        return ""
    op = api.target_direction(metric)
    value = c2.number_input(f"{metric} {op}", min_value=0.0, value=0.99 if op == ">=" else 0.01, step=0.001,
                            format="%.4g", key=f"{key}_value_{metric}")
    return f"{metric}{op}{value:g}"
