"""Plugins: from a custom op found in the model to a working, verified implementation per engine.

Pick an op, see its signature as the model uses it, edit the Python body (ONNX Runtime Python op or
OpenVINO conversion extension), run it against the reference in a fresh confined worker, and download the
plugin packages (C++ for ONNX Runtime, OpenVINO and TensorRT included). Logic lives in ``studio.plugins``
behind the facade; running user code is off on a shared server.
"""

from __future__ import annotations

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


def _run_section(sig, handle) -> dict[str, str]:
    st.markdown("#### Python implementation")
    target = st.radio("Implementation", list(_PY), format_func=_PY.__getitem__, horizontal=True, key="plugin_py_target")
    edited: dict[str, str] = {}
    if state.shared_mode():
        st.info("Running custom-op code is disabled on this shared server (it would run your code on the server). "
                "Download the package and run it locally with `onnx-studio plugin`.")
        st.code(api.render_python_impl(sig, target, model_name=handle.path.name), language="python")
        return edited
    code = _editor(sig, handle, target)
    edited[target] = code
    results = st.session_state.setdefault("plugin_runs", {})
    if st.button("Run and compare with the reference", type="primary", key="plugin_run"):
        result = widgets.run_stoppable("Running the op in a fresh worker", lambda on_tick: api.run_python_op(
            handle, sig.qualified, code, target=target, signature=sig, pool_key=state.session_id(), on_tick=on_tick))
        if result is not None:
            results[(handle.sha256, sig.qualified, target)] = result
    result = results.get((handle.sha256, sig.qualified, target))
    if result is not None:
        _show_run(result)
    file_name = f"{sig.ident}_{'op' if target == 'ort-python' else 'extension'}.py"
    widgets.cli_hint(PluginRequest(op=sig.qualified, targets=(target,), impl=file_name).command(handle.path.name))
    return edited


def _package_section(sig, handle, edited: dict[str, str]) -> None:
    st.markdown("#### Plugin packages")
    targets = st.multiselect("Targets", list(_TARGETS), default=list(_TARGETS), format_func=_TARGETS.__getitem__,
                             key="plugin_targets")
    if not targets:
        return
    if st.button("Generate packages", key="plugin_generate"):
        out = state.workspace().job_dir(f"plugins-{sig.ident}")
        impl = next(iter(edited.values()), None)
        scaffold = widgets.guarded(lambda: api.scaffold_plugin(handle, sig.qualified, targets, out, signature=sig,
                                                               impl=impl), spinner="Writing the packages…")
        if scaffold is not None:
            st.session_state["plugin_scaffold"] = (handle.sha256, sig.qualified, scaffold)
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
        buildable = [p.target for p in scaffold.packages if p.target in ("ort-cpp", "openvino-cpp")]
        if buildable and not api.plugin_builds_allowed():
            st.info("Building C++ packages is disabled on this shared server (it would run the package's CMake and "
                    "compiler on the server). Download the packages and build them locally.")
        elif buildable:
            if st.button("Build the C++ packages and check them", key="plugin_build"):
                builds = []
                for target in buildable:
                    result = widgets.run_stoppable(f"Building {target}", lambda on_tick, t=target: api.build_plugin(
                        handle, scaffold, t, signature=sig, pool_key=state.session_id(), on_tick=on_tick))
                    if result is not None:
                        builds.append(result)
                st.session_state["plugin_builds"] = builds
            for b in st.session_state.get("plugin_builds", []):
                (st.success if b else st.error)(f"{b.target}: {widgets.md_escape(b.message, 500)}")
                if b.log_tail and not b.built:
                    st.code(b.log_tail, language="text")
    # The page writes the packages (no Python run: that is the section above) and builds the C++ ones.
    builds = api.plugin_builds_allowed() and any(t in ("ort-cpp", "openvino-cpp") for t in targets)
    widgets.cli_hint(PluginRequest(op=sig.qualified, targets=tuple(targets), run=False, build=builds)
                     .command(handle.path.name))


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
