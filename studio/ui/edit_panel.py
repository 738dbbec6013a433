"""Edit actions on the Graph page's node panel (DESIGN.md §13): each builds the same edit script
``onnx-studio edit --script`` takes, previews it (``api.validate_edit_script``: what it removes
and changes, checked, nothing written), then applies it (``api.edit``, verified against the
original) into a new project version whose provenance holds the script. "Show as script" gives
the JSON and the equivalent CLI command, so a click and a script are one thing."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import streamlit as st

from studio import api
from studio.core.requests import EditRequest
from studio.core.fmt import printable
from studio.ui import state, widgets

ACTIONS = ("Bypass", "Delete with what follows", "Rename", "Add output here", "Edit an attribute", "Insert after",
           "Replace a weight (.npy)", "Extract from here")
INSERT_TYPES = ("Identity", "Cast", "Transpose")           # studio.edit.script.INSERTABLE
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
ATTR_TYPES = ("keep / infer", "INT", "FLOAT", "STRING", "INTS", "FLOATS", "STRINGS")
NEW_ATTR = "(a new attribute)"
_PREVIEW = "graph_edit_preview"
_DONE = "graph_edit_done"


def _k(key: str, node_id: str, what: str) -> str:
    """Widget keys per node: another node's panel starts from its own names."""
    return f"{key}_edit_{hashlib.sha1(node_id.encode()).hexdigest()[:10]}_{what}"


def json_value(text: str) -> Any:
    """An attribute value as typed: JSON (``[1, 1]``, ``0.5``, ``"x"``), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def main_tensors(summary) -> list[str]:
    """Tensor names of the main graph a cut may name: graph inputs, then every node output."""
    names = [t.name for t in summary.inputs]
    seen = set(names)
    for n in summary.nodes:
        if n.scope:
            continue
        for o in n.outputs:
            if o and o not in seen:
                seen.add(o)
                names.append(o)
    return names


def _build(action: str, details, summary, node_id: str, key: str) -> list[dict] | None:
    """The script the action's fields describe, or None (with a caption) until they describe one."""
    info = details.info
    name = info.name
    outs = [p.name for p in details.outputs if p.name]
    if action in ("Bypass", "Delete with what follows", "Edit an attribute") and not name:
        st.caption("This node has no name, and edits name the node they change: rename it first "
                   "(Rename, or optimize --passes name-nodes).")
        return None
    if action == "Bypass":
        st.caption("Deletes the node; its one data input takes the place of its output (same type and shape). "
                   "Identity-like nodes are verified numerically against the original.")
        return [{"op": "bypass", "node": name}]
    if action == "Delete with what follows":
        st.caption("Deletes the node and every node downstream of it; outputs they made are removed.")
        return [{"op": "delete", "node": name}]
    if action == "Rename":
        new_node = st.text_input("Node name", value=name, key=_k(key, node_id, "rename_node"))
        tensors = {}
        for i, o in enumerate(outs):
            new = st.text_input(f"Output tensor {i}", value=o, key=_k(key, node_id, f"rename_t{i}"))
            if new and new != o:
                tensors[o] = new
        op: dict[str, Any] = {"op": "rename"}
        if tensors:
            op["tensors"] = tensors
        if new_node and new_node != name and name:
            op["nodes"] = {name: new_node}
        if len(op) == 1:
            st.caption("Change a name to build the edit (every reference follows, subgraphs included).")
            return None
        return [op]
    if action == "Add output here":
        if not outs:
            return None
        tensor = outs[0] if len(outs) == 1 else st.selectbox("Tensor", outs, key=_k(key, node_id, "out_tensor"))
        st.caption(f"Makes {printable(tensor, 80)} a graph output (type and shape inferred); the result is checked "
                   "to reproduce the original's values there.")
        return [{"op": "add_output", "tensor": tensor}]
    if action == "Edit an attribute":
        have = [a.name for a in details.attributes]
        pick = st.selectbox("Attribute", [*have, NEW_ATTR], key=_k(key, node_id, "attr_pick"))
        attr = st.text_input("New attribute's name", key=_k(key, node_id, "attr_name")) if pick == NEW_ATTR else pick
        if not attr:
            return None
        if pick != NEW_ATTR and st.checkbox("Remove it (the op's default applies)", key=_k(key, node_id, "attr_rm")):
            return [{"op": "remove_attr", "node": name, "name": attr}]
        current = next((a.value for a in details.attributes if a.name == attr), "")
        text = st.text_input("Value (JSON: 1, 0.5, [1, 1], \"text\")", value=current,
                             key=_k(key, node_id, f"attr_value_{attr}"))
        kind = st.selectbox("Type", ATTR_TYPES, key=_k(key, node_id, "attr_type"))
        if not text:
            return None
        op = {"op": "set_attr", "node": name, "name": attr, "value": json_value(text)}
        if kind != ATTR_TYPES[0]:
            op["type"] = kind
        return [op]
    if action == "Insert after":
        return _insert(summary, outs, node_id, key)
    if action == "Replace a weight (.npy)":
        return _replace_weight(details, node_id, key)
    # Extract: the tensors of a cut, this node's outputs by default.
    tensors = main_tensors(summary)
    inputs = st.multiselect("Cut inputs (become the new model's inputs)", tensors,
                            default=[t.name for t in summary.inputs if t.name in tensors],
                            key=_k(key, node_id, "cut_inputs"), format_func=lambda s: printable(s, 100))
    outputs = st.multiselect("Cut outputs (become its outputs)", tensors, default=[o for o in outs if o in tensors],
                             key=_k(key, node_id, "cut_outputs"), format_func=lambda s: printable(s, 100))
    if not outputs:
        st.caption("Pick at least one output tensor.")
        return None
    op: dict[str, Any] = {"op": "extract", "inputs": list(inputs), "outputs": list(outputs)}
    meta = [k for k, _ in getattr(summary, "metadata", ())]
    if meta:        # the source's metadata (task, imgsz...) may not describe the part: the user says
        choice = st.radio(f"The source's metadata ({len(meta)} properties: {printable(', '.join(meta[:6]), 120)})",
                          ["keep", "drop"], index=None, horizontal=True, key=_k(key, node_id, "cut_metadata"),
                          help="keep: the part carries the source's properties (task, imgsz...); drop: none")
        if choice is None:
            st.caption("Choose whether the extracted part keeps the source's metadata.")
            return None
        op["metadata"] = choice
    return [op]


def _insert(summary, outs: list[str], node_id: str, key: str) -> list[dict] | None:
    """An Identity, Cast or Transpose on one of the node's outputs, before all (or the chosen) readers."""
    if not outs:
        return None
    tensor = outs[0] if len(outs) == 1 else st.selectbox("On tensor", outs, key=_k(key, node_id, "ins_tensor"))
    op_type = st.selectbox("Node", INSERT_TYPES, key=_k(key, node_id, "ins_type"))
    op: dict[str, Any] = {"op": "insert", "tensor": tensor, "op_type": op_type}
    if op_type == "Cast":
        op["attrs"] = {"to": st.selectbox("To", DTYPES, index=1, key=_k(key, node_id, "ins_cast"))}
    elif op_type == "Transpose":
        text = st.text_input("perm (JSON list, empty: reverse the axes)", key=_k(key, node_id, "ins_perm"))
        perm = json_value(text) if text else None
        if perm is not None:
            if not isinstance(perm, list) or not all(isinstance(x, int) for x in perm):
                st.caption("perm is a list of axes, like [0, 2, 3, 1].")
                return None
            op["attrs"] = {"perm": perm}
    readers = [n.name for n in summary.nodes if not n.scope and n.name and tensor in n.inputs]
    if len(readers) > 1:
        chosen = st.multiselect("Only before these readers (empty: all)", readers,
                                key=_k(key, node_id, "ins_readers"))
        if chosen:
            op["consumers"] = list(chosen)
    st.caption("Inserted on the edge: the readers take the new node's output (an Identity keeps the numbers, "
               "and is verified so).")
    return [op]


def _replace_weight(details, node_id: str, key: str) -> list[dict] | None:
    """One of the node's weights replaced by an uploaded .npy of the same dtype and shape."""
    weights = [p for p in details.inputs if p.is_weight and p.name]
    if not weights:
        st.caption("This node reads no initializer.")
        return None
    names = [p.name for p in weights]
    name = names[0] if len(names) == 1 else st.selectbox("Weight", names, key=_k(key, node_id, "w_name"),
                                                         format_func=lambda s: printable(s, 100))
    port = weights[names.index(name)]
    st.caption(f"{printable(name, 100)} is {port.dtype}{port.shape}: the .npy must have the same dtype and shape.")
    up = st.file_uploader(".npy file (numpy.save)", type=["npy"], key=_k(key, node_id, "w_npy"))
    if up is None:
        return None
    memo_key = _k(key, node_id, "w_saved")
    ident = (up.name, up.size, up.file_id)
    memo = st.session_state.get(memo_key)
    if not memo or memo[0] != ident:
        path = widgets.guarded(lambda: api.save_npy_upload(up.getvalue(), state.workspace().job_dir("edit-npy"),
                                                           up.name))
        if path is None:
            return None
        st.session_state[memo_key] = memo = (ident, str(path))
    return [{"op": "replace_initializer", "name": name, "npy": memo[1]}]


def script_json(ops: list[dict]) -> str:
    """The script as ``edit --script`` reads it."""
    return json.dumps(ops, indent=1)


def cli_command(model_name: str, project: str | None = None, ops: list[dict] | None = None) -> str:
    """The ``edit`` command that applies the shown script (saved as edits.json) to this model."""
    return EditRequest(operations=ops or []).command(model_name, project=project or None)


def _preview_key(handle, ops: list[dict]) -> str:
    return handle.sha256 + json.dumps(ops, sort_keys=True)


LIST_SHOWN = 40          # names listed in a preview; the rest are counted ("and N more"), never cut silently


def name_list(names, shown: int = LIST_SHOWN) -> str:
    """``a, b, c and N more``: every name counted, the first ``shown`` listed (the CLI prints them all)."""
    names = list(names)
    head = ", ".join(printable(n, 160) for n in names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")


def verification_text(v, esc=printable) -> str:  # noqa: ANN001 - a Verification; esc: md_escape on a page
    """The verification as one full sentence: its status and message whole, the method only when there
    was one (never a stray "(none)"); ``esc`` applies to the model-derived parts only."""
    method = f" ({esc(v.method, 30)})" if v.method and v.method != "none" else ""
    return f"Verification {esc(v.verdict, 400)}{method}: {esc(v.message, 600)}"


def numeric_interface(lines: list[str], shapes: dict) -> list[str]:
    """``name: dtype[shape]`` lines with the numeric shape at the model's dims where the summary (run at
    those dims) knows the tensor, instead of the exporter's formulas (``((height - 1)//2) + 1``)."""
    out = []
    for line in lines:
        name, sep, typed = line.rpartition(": ")
        t = shapes.get(name) if sep else None
        if t is not None and t.shape is not None and all(isinstance(d, int) for d in t.shape):
            out.append(f"{name}: {typed.partition('[')[0]}[{','.join(str(d) for d in t.shape)}]")
        else:
            out.append(line)
    return out


def _shapes_at_dims(handle) -> dict:
    """Tensor name -> TensorInfo of the model at its dims, when dims are set (else none: symbols stay)."""
    if not state.dims():
        return {}
    summary = widgets.guarded(lambda: state.summary(handle, state.dims()))
    if summary is None:
        return {}
    return {t.name: t for t in (*summary.inputs, *summary.outputs, *summary.edges)}   # edges: inferred at the dims


def _show_preview(result, shapes: dict | None = None) -> None:
    st.success("Preview: " + widgets.md_escape(result.message, 300))
    for note in result.notes:
        st.markdown("- " + widgets.md_escape(note, 600))
    st.markdown(f"**Removes {len(result.nodes_removed)} nodes**" + (": " + widgets.md_escape(
        name_list(result.nodes_removed), 8000) if result.nodes_removed else ""))
    if result.nodes_added:
        st.markdown(f"**Adds {len(result.nodes_added)} nodes**: "
                    + widgets.md_escape(name_list(result.nodes_added), 8000))
    if result.nodes_renamed:
        st.markdown(f"**Renames {len(result.nodes_renamed)} nodes**: "
                    + widgets.md_escape(name_list(result.nodes_renamed), 8000))
    _interface(result, shapes)


def _interface(result, shapes: dict | None = None) -> None:
    """Inputs and outputs before → after, where they change (a split: each part's own); numeric shapes
    at the model's dims where they are set."""
    shapes = shapes or {}
    before = {k: numeric_interface(v, shapes) for k, v in result.before.items()}
    for i, after in enumerate(result.after):
        part = f"Part {i + 1} " if len(result.after) > 1 else ""
        for kind in ("inputs", "outputs"):
            if after[kind] != result.before[kind]:
                st.markdown(f"**{part + kind if part else kind.capitalize()}**: "
                            + widgets.md_escape(", ".join(before[kind]), 2000)
                            + " → " + widgets.md_escape(", ".join(numeric_interface(after[kind], shapes)), 2000))


def _apply(handle, version, ops: list[dict]) -> None:
    """Apply, verify and keep the result as a new version (selected); the report survives the rerun."""
    ws = state.workspace()

    def run():
        request = EditRequest(operations=ops)
        with state.job("edit", {"script": ops, "request": request.to_dict()}) as job:
            res = api.edit(handle, request, job.dir / f"{handle.name}.onnx", pool_key=state.session_id())
            job.message = res.message[:300]
        label = "edit: " + ", ".join(o["op"] for o in ops)
        return res, api.add_edited_version(ws, version.id, res, label=label[:60], job_id=job.id,
                                           source_sha256=handle.sha256, request=request)

    done = widgets.guarded(run, spinner="Applying and verifying the edit…")
    if done is None:
        return
    result, new = done
    state.drop_result(_PREVIEW)
    # the banner belongs to the version the edit made (selected next), of this model and project only
    state.keep_result(_DONE, {"result": result, "version": new.id, "parent": version.id, "script": ops},
                      version=new)
    state.set_current(new.id)
    st.rerun()


def node_edit(handle, summary, node_id: str, key: str) -> None:
    """The node panel's Edit section: pick an action, preview it, apply it, or see it as a script."""
    version = state.current_version()
    details = api.node_details(handle, summary, node_id)
    if details is None:
        return
    st.markdown("#### Edit this node")
    outs = [p.name for p in details.outputs if p.name]
    if outs and not details.info.scope:
        st.button("Add its outputs to the cut", key=f"{key}_edit_to_cut", on_click=add_to_cut, args=(outs,),
                  help="Collects the tensors of a cut node by node as you click them in the drawing; the cut is "
                       "split in the model panel below (Edit the model → Split at a cut)")
    action = st.radio("Edit action", ACTIONS, index=None, horizontal=True, key=f"{key}_edit_action")
    if action is None:
        st.caption("Pick an edit: it is previewed first, then applied as a new version (verified against this one).")
        return
    ops = _build(action, details, summary, node_id, key)
    if ops is None:
        return
    preview_apply(handle, version, ops, key)


def preview_apply(handle, version, ops: list[dict], key: str) -> None:
    """Preview (what the script removes and changes, checked, nothing written), then Apply as a new
    version; "Show as script" gives the JSON and the CLI command (the node and model panels share it)."""
    pkey = _preview_key(handle, ops)
    c1, c2, c3 = st.columns([1, 2, 2])
    if c1.button("Preview", key=f"{key}_edit_preview", type="secondary"):
        result = widgets.guarded(lambda: api.validate_edit_script(handle, ops), spinner="Checking the edit…")
        if result is None:
            state.drop_result(_PREVIEW)
        else:
            state.keep_result(_PREVIEW, (pkey, result), {"ops": ops})
    saved = state.bound_result(_PREVIEW, {"ops": ops})
    previewed = saved is not None and saved[0] == pkey
    if c2.button("Apply as a new version", key=f"{key}_edit_apply", type="primary", disabled=not previewed,
                 help="Preview the edit first" if not previewed else "verified against this version, then saved"):
        _apply(handle, version, ops)
    show = c3.toggle("Show as script", key=f"{key}_edit_script")
    if previewed:
        _show_preview(saved[1], _shapes_at_dims(handle))
    if show:
        st.code(script_json(ops), language="json")
        project = state.project()
        st.code(cli_command(handle.path.name, getattr(project, "name", None), ops), language="bash")


CUT_KEY = "graph_model_split_cut"         # the model panel's split picker (studio.ui.edit_model)


def add_to_cut(tensors: list[str]) -> None:
    """Append tensors to the split picker (a callback: it runs before the picker is drawn again)."""
    have = list(st.session_state.get(CUT_KEY) or [])
    st.session_state[CUT_KEY] = have + [t for t in tensors if t not in have]
    st.session_state["graph_model_action"] = "Split at a cut"


def _to_diff(model_id: str, parent: str, new: str) -> None:
    """The diff of exactly this edit: its parent before, the version it made after (named, not derived
    from whichever version is current when the rerun draws the page), with that version selected."""
    state.set_current(new)
    st.session_state["graph_mode"] = "Diff"
    st.session_state["diff_a"] = f"{model_id}:{parent}"
    st.session_state["diff_b"] = f"{model_id}:{new}"


def _undo(parent: str) -> None:
    state.set_current(parent)
    state.drop_result(_DONE)


def last_edit() -> None:
    """The report of the edit just applied: the version, its verification, what changed; undo, diff.
    Shown only on the version the edit made (this project, this model): never on another's page."""
    done = state.bound_result(_DONE)
    if not done:
        return
    result = done["result"]
    v = result.verification
    st.success(f"Saved as version {done['version']} (now selected; its parent is {done['parent']}). "
               + widgets.md_escape(result.message, 300))
    if v is not None:
        (st.error if not v.ok else st.info)(verification_text(v, widgets.md_escape))
    if result.nodes_removed:
        st.markdown(f"**Removed {len(result.nodes_removed)} nodes**: "
                    + widgets.md_escape(name_list(result.nodes_removed), 8000))
    _interface(result)
    c1, c2, c3, c4 = st.columns(4)
    c1.button("See it in the diff", key="graph_edit_to_diff", on_click=_to_diff,
              args=(state.workspace().id, done["parent"], done["version"]))
    c2.button("Undo (select the parent)", key="graph_edit_undo", on_click=_undo, args=(done["parent"],))
    c3.button("Dismiss", key="graph_edit_dismiss", on_click=lambda: state.drop_result(_DONE))
    if c4.toggle("Show as script", key="graph_edit_done_script", help="the applied edit, as edit --script reads it"):
        st.code(script_json(done["script"]), language="json")
