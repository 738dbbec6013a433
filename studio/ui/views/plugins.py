"""Plugins: from a custom op found in the model to a working, verified implementation per engine.

Pick an op, see its signature as the model uses it, edit the Python body (ONNX Runtime Python op or
OpenVINO conversion extension), run it against the reference in a fresh confined worker, and download the
plugin packages (C++ for ONNX Runtime, OpenVINO and TensorRT included). Logic lives in ``studio.plugins``
behind the facade; running user code is off on a shared server.

Each action is one ``PluginRequest`` handed to ``api.make_plugins``, the request its hint prints (the
``plugin`` CLI builds the same one from its flags): Run is ``--target <one Python target> --impl FILE``,
Generate ``--no-run`` over the chosen targets, Build the same with ``--build``. Page-only steps, which the CLI
has no flag for: the Python body is edited here rather than read from FILE (the editor's text goes with the
request as ``impl_code``; FILE is the name the hint asks the user to save it under), the signature collected
once for the page is reused, and Build comes after Generate (it writes the packages again, as the CLI's
``--build`` run does, then compiles them).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from studio import api
from studio.core.requests import PluginRequest
from studio.ui import state, widgets

_TARGETS = {"ort-python": "ONNX Runtime · Python op", "ort-cpp": "ONNX Runtime · C++ library",
            "openvino-python": "OpenVINO · Python conversion extension", "openvino-cpp": "OpenVINO · C++ extension",
            "tensorrt": "TensorRT · IPluginV3 (not compiled here)"}
_PY = {"ort-python": "ONNX Runtime Python op (compute)", "openvino-python": "OpenVINO conversion extension (convert)"}
_OTHER = "another op…"
_STATUS = {"ok": "✅", "mismatch": "❌", "error": "🛑", "unverified": "❔"}


def _pick_op(handle) -> str | None:
    customs = api.custom_op_names(handle)
    if not customs:
        st.info("No custom ops in this model. You can still scaffold a plugin for any of its ops (for example a "
                "standard op an engine lacks) by naming it below.")
    choice = st.selectbox("Op", [*customs, _OTHER], key="plugin_op_choice",
                          format_func=lambda c: c if c == _OTHER else f"{c} (custom)")
    if choice == _OTHER:
        typed = st.text_input("Op as DOMAIN::OP_TYPE", key="plugin_op_typed", placeholder="ai.onnx::GridSample")
        return typed.strip() or None
    return choice


def _signature(handle, op: str):
    cache = st.session_state.setdefault("plugin_signatures", {})
    key = (handle.sha256, op)
    if key not in cache:
        sig = widgets.guarded(lambda: api.plugin_signature(handle, op, pool_key=state.session_id()),
                              spinner="Collecting the op's signature and capturing its inputs (ONNX Runtime)…")
        if sig is None:
            return None
        if len(cache) > 8:
            cache.clear()
        cache[key] = sig
    return cache[key]


def _show_signature(sig) -> None:
    st.markdown("#### Signature of " + widgets.md_code(sig.qualified, 120))
    st.caption(f"{len(sig.nodes)} node(s) · {'custom op' if sig.custom else 'standard op'} · reference: "
               f"{widgets.md_escape(sig.reference, 200) if sig.reference else 'none registered'}")
    rows = [{"port": f"input {p.index}" + (" (optional)" if p.optional else ""), "name": p.name,
             "dtype": p.dtype or "?", "shapes": ", ".join(str(list(s)) if s else "?" for s in p.shapes),
             "from": ", ".join(p.sources)} for p in sig.inputs]
    rows += [{"port": f"output {p.index}", "name": p.name, "dtype": p.dtype or "?",
              "shapes": ", ".join(str(list(s)) if s else "?" for s in p.shapes), "from": ", ".join(p.sources)}
             for p in sig.outputs]
    widgets.dataframe(pd.DataFrame(rows, columns=["port", "name", "dtype", "shapes", "from"]), hide_index=True,
                 width="stretch")
    if sig.attributes:
        widgets.dataframe(pd.DataFrame([{"attribute": a.name, "type": a.type, "values seen": ", ".join(map(str, a.values)),
                                    "nodes": f"{a.nodes_with}/{a.nodes_total}"} for a in sig.attributes]),
                     hide_index=True, width="stretch")
    st.caption(f"{len(sig.samples)} sample(s) captured from the model"
               + (" · whole-model reference outputs available" if sig.model_outputs is not None else ""))
    if sig.known:
        st.caption("Known op: " + widgets.md_escape(sig.known.get("origin") or "", 120) + " — "
                   + widgets.md_escape(sig.known.get("note") or "", 300))
    for note in sig.notes:
        st.caption("ℹ️ " + widgets.md_escape(note, 300))


def _code_key(sig, target: str) -> str:
    return f"plugin_code_{sig.ident}_{target}"


def _editor(sig, handle, target: str) -> str:
    default = api.render_python_impl(sig, target, model_name=handle.path.name)
    return widgets.code_editor(f"Python body — {_PY[target]}", default, _code_key(sig, target),
                               reset_label="Reset to the generated code",
                               help="Edit, then Run: it runs in a fresh worker, fenced off from the rest of the "
                                    "machine")


def _show_run(result) -> None:
    icon = _STATUS.get(result.status, "❔")
    text = f"{icon} {widgets.md_escape(result.message, 600)}"
    (st.success if result.status == "ok" else st.warning if result.status == "unverified" else st.error)(text)
    if result.samples:
        widgets.dataframe(pd.DataFrame([{"node": s.node, "ok": s.ok, "max abs": s.max_abs, "result": s.summary}
                                   for s in result.samples]), hide_index=True, width="stretch")
    if result.model:
        st.caption("Whole model vs. reference: " + widgets.md_escape(result.model.get("summary", ""), 300))
    fence = result.confinement or {}
    if fence:
        st.caption(f"Ran in a fresh worker in {result.seconds:.1f} s · writes fenced "
                   f"({'Landlock ABI ' + str(fence.get('landlock_abi')) if fence.get('landlock_abi') else 'audit hook'})"
                   " · environment stripped to locale, PATH and thread settings")


def _impl_name(sig, target: str) -> str:
    """The file the hint's ``--impl`` names for the editor's code (the name the package gives that body)."""
    return f"{sig.ident}_{'op' if target == 'ort-python' else 'extension'}.py"


def _make(handle, sig, request: PluginRequest, label: str, impl_code: str | None):
    """Hand the facade ``request`` (the one the section's hint prints), in a fresh job folder."""
    out = state.workspace().job_dir(f"plugins-{sig.ident}")
    return widgets.run_stoppable(label, lambda on_tick: api.make_plugins(
        handle, request, out, signature=sig, impl_code=impl_code, pool_key=state.session_id(), on_tick=on_tick))


def _run_section(sig, handle) -> dict[str, str]:
    """The Python editor and its run; returns {target: code} where the editor's code is not the generated one."""
    st.markdown("#### Python implementation")
    target = st.radio("Implementation", list(_PY), format_func=_PY.__getitem__, horizontal=True, key="plugin_py_target")
    edited: dict[str, str] = {}
    if state.shared_mode():
        st.info("Running custom-op code is disabled on this shared server (it would run your code on the server). "
                "Download the package and run it locally with `onnx-studio plugin`.")
        st.code(api.render_python_impl(sig, target, model_name=handle.path.name), language="python")
        return edited
    code = _editor(sig, handle, target)
    if code != api.render_python_impl(sig, target, model_name=handle.path.name):
        edited[target] = code
    request = PluginRequest(op=sig.qualified, targets=(target,), impl=_impl_name(sig, target))
    results = st.session_state.setdefault("plugin_runs", {})
    if st.button("Run and compare with the reference", type="primary", key="plugin_run"):
        made = _make(handle, sig, request, "Running the op in a fresh worker", code)
        if made is not None and not made.runs:
            entry = "compute" if target == "ort-python" else "convert"
            st.warning(f"Not run: the code has no {entry}(...) function, so it is not a body for {_PY[target]}.")
        elif made is not None:
            results[(handle.sha256, sig.qualified, target)] = made.runs[0]
    result = results.get((handle.sha256, sig.qualified, target))
    if result is not None:
        _show_run(result)
    widgets.cli_hint(request.command(handle.path.name))
    return edited


def _show_builds(builds, cpp: list[str]) -> None:
    for b in builds:
        if b.target not in cpp:                       # TensorRT: written, not compiled here (the message says why)
            st.info(f"{b.target}: {widgets.md_escape(b.message, 500)}")
            continue
        (st.success if b else st.error)(f"{b.target}: {widgets.md_escape(b.message, 500)}")
        if b.log_tail and not b.built:
            st.code(b.log_tail, language="text")


def _package_section(sig, handle, edited: dict[str, str]) -> None:
    st.markdown("#### Plugin packages")
    targets = st.multiselect("Targets", list(_TARGETS), default=list(_TARGETS), format_func=_TARGETS.__getitem__,
                             key="plugin_targets")
    if not targets:
        return
    # The editor's code (when it is not the generated body) goes in as the file the hint's --impl names.
    impl_target, impl_code = next(iter(edited.items()), (None, None))
    cpp = [t for t in targets if t in ("ort-cpp", "openvino-cpp")]
    builds = bool(cpp) and api.plugin_builds_allowed()
    request = PluginRequest(op=sig.qualified, targets=tuple(targets), run=False, build=builds,
                            impl=_impl_name(sig, impl_target) if impl_target else None)
    if st.button("Generate packages", key="plugin_generate"):
        made = _make(handle, sig, replace(request, build=False), "Writing the packages", impl_code)
        if made is not None:
            st.session_state["plugin_scaffold"] = (handle.sha256, sig.qualified, made.scaffold)
            st.session_state.pop("plugin_builds", None)
    held = st.session_state.get("plugin_scaffold")
    if held and held[:2] == (handle.sha256, sig.qualified):
        scaffold = held[2]
        for p in scaffold.packages:
            st.markdown(f"**{widgets.md_escape(p.title, 120)}** — {widgets.md_code(p.folder, 120)} "
                        f"({len(p.files)} files)")
            st.caption(widgets.md_escape(p.status, 400))
        st.download_button("Download the plugin packages (zip)", data=api.zip_folder(scaffold.root),
                           file_name=f"{scaffold.root.name}-plugins.zip", mime="application/zip", key="plugin_zip")
        if cpp and not builds:
            st.info("Building C++ packages is disabled on this shared server (it would run the package's CMake and "
                    "compiler on the server). Download the packages and build them locally.")
        elif builds:
            if st.button("Build the C++ packages and check them", key="plugin_build"):
                made = _make(handle, sig, request, "Writing and building the packages", impl_code)
                if made is not None:
                    st.session_state["plugin_scaffold"] = (handle.sha256, sig.qualified, made.scaffold)
                    st.session_state["plugin_builds"] = list(made.builds)
            _show_builds(st.session_state.get("plugin_builds", []), cpp)
    widgets.cli_hint(request.command(handle.path.name))


def render() -> None:
    opened = widgets.page_model("Plugins")
    if opened is None:
        return
    handle, _ = opened
    op = _pick_op(handle)
    if not op:
        return
    sig = _signature(handle, op)
    if sig is None:
        return
    _show_signature(sig)
    edited = _run_section(sig, handle)
    _package_section(sig, handle, edited)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
