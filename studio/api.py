"""The facade: everything a user can do, as typed functions over result objects.

The CLI (``studio.cli``) and the Streamlit pages (``studio.ui``) import only this module and render
what its functions return; ``--json`` prints the same objects. It holds no logic: the value types
every front end needs, and the names of the facade functions, each defined in one room module of
``studio/facade/`` (``_ROOMS``). A room is imported on the first use of one of its names (PEP 562), so
``onnx-studio --help`` imports no capability; the rooms import their capabilities at module level, and
the same names are imported under ``TYPE_CHECKING`` below so the layer contracts and type checkers see
them (tests/test_facade.py keeps the two lists and each room's ``__all__`` equal). Heavy work lives in
``studio.core``, ``studio.inspect``, ``studio.graphview``, ``diagnostics``, ``passes``, ``profilers``,
``studio.export`` and the other capability packages (docs/architecture.md section 1).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from studio.core.errors import StudioError
from studio.core.findings import Finding, FindingGroup, Report
from studio.core.model import ModelHandle
from studio.core.uploads import UploadedFile
from studio.core.workspace import Version, Workspace

if TYPE_CHECKING:
    from studio.facade.inspect import (
        ModelSummary, MemoryReport, load, inspect, decoder_spec, inspect_decoder, kv_budget, parse_memory,
        memory_plan, dim_hints, input_dim_keys, derived_dims, release_session, make_inputs, node_details,
        weight_stats, ImagePreprocess, save_npz_upload, save_npy_upload, save_image_uploads,
    )
    from studio.facade.graph import (
        GraphDiff, GraphIndex, GraphView, Overlay, Table, compatibility_overlay_data, graph_index,
        graph_index_inspected, graph_prefers_fast_path, graph_levels, search_nodes, graph_overlays, graph_view,
        graph_echarts, graph_dot, graph_legend_html, graph_html, write_graph_view, graph_scene, graph_viewer_html,
        write_graph_viewer, diff_viewer_html, write_diff_viewer, diff, diff_versions, diff_views,
        diff_region_view, diff_tables, write_diff, overlay_data_from_json, DATA_OVERLAYS,
        SVG_MAX_ITEMS,
    )
    from studio.facade.check import (
        default_engines, check, apply_fix, check_engines, fix_to_file, default_dims,
    )
    from studio.facade.optimize import (
        merge_decoders, memory_reorder, list_passes, optimize, compare_peers, add_optimized_version,
        optimize_report_rows, op_count_diff,
    )
    from studio.facade.edit import (
        edit_script, validate_edit_script, edit, add_edited_version,
    )
    from studio.facade.plugins import (
        PluginRun, make_plugins, plugin_signature, scaffold_plugin, run_python_op, plugin_builds_allowed,
        build_plugin, plugin_kernel_known, custom_op_names, PYTHON_PLUGIN_TARGETS, plugin_targets, read_plugin_code,
        render_python_impl, zip_folder,
    )
    from studio.facade.profile import (
        Profile, profile, openvino_ir_target, profile_generation, find_nsys, nsys_plan, run_nsys,
        ProfileOptions, ProfileTarget, profile_options, GenerationOptions, parse_engines,
        parse_engine, engine_label,
    )
    from studio.facade.verify import (
        compare, precision, PRECISION_VARIANTS, default_precision_variants,
    )
    from studio.facade.export import (
        export, EXPORT_TARGETS, MOBILE_TARGETS, OV_PRECISIONS, CALIBRATION_METHODS, ORT_LEVELS,
        parse_shape_spec, export_target_rows, export_artifact_rows, export_bench_rows,
    )
    from studio.facade.projects import (
        input_run, shared_mode, projects_root, create_project, list_projects, open_project,
        project_for_model, rename_project, duplicate_project, delete_project, export_project, import_project,
        project_models, project_model, add_model, model_for, add_version, list_versions, record_artifact,
        project_artifacts, project_datasets, project_jobs, get_settings, set_setting, job,
    )
    from studio.facade.data import (
        add_dataset, add_dataset_upload, sample_photos_folder, dataset, remove_dataset, dataset_damage,
        preview_dataset, dataset_inputs_file, suggest_preprocessing, preprocessing_recipe, recipe_from_json,
        recipe_fields, recipe_choices, set_dataset_recipe, dataset_with_recipe, preview_dataset_samples,
        evaluate_on_dataset, output_tasks, stored_output_tasks, set_output_tasks, output_task_kinds,
        task_targets, target_direction, task_choices, OUTPUT_TASKS, parse_task_options,
    )
    from studio.facade.engines import engines
    from studio.facade.charts import (
        layer_error_figure, tradeoff_figure,
    )

# room (a module of studio/facade/) -> the facade names it defines (its ``__all__``)
_ROOMS: dict[str, tuple[str, ...]] = {
    "inspect": (
        "ModelSummary", "MemoryReport", "load", "inspect", "decoder_spec", "inspect_decoder", "kv_budget",
        "parse_memory", "memory_plan", "dim_hints", "input_dim_keys", "derived_dims", "release_session",
        "make_inputs", "node_details", "weight_stats", "ImagePreprocess", "save_npz_upload",
        "save_npy_upload", "save_image_uploads",
    ),
    "graph": (
        "GraphDiff", "GraphIndex", "GraphView", "Overlay", "Table", "compatibility_overlay_data",
        "graph_index", "graph_index_inspected", "graph_prefers_fast_path", "graph_levels", "search_nodes",
        "graph_overlays", "graph_view", "graph_echarts", "graph_dot", "graph_legend_html", "graph_html", "write_graph_view",
        "graph_scene", "graph_viewer_html", "write_graph_viewer", "diff_viewer_html", "write_diff_viewer",
        "diff", "diff_versions", "diff_views", "diff_region_view", "diff_tables", "write_diff",
        "overlay_data_from_json", "DATA_OVERLAYS", "SVG_MAX_ITEMS",
    ),
    "check": (
        "default_engines", "check", "apply_fix", "check_engines", "fix_to_file", "default_dims",
    ),
    "optimize": (
        "merge_decoders", "memory_reorder", "list_passes", "optimize", "compare_peers",
        "add_optimized_version", "optimize_report_rows", "op_count_diff",
    ),
    "edit": (
        "edit_script", "validate_edit_script", "edit", "add_edited_version",
    ),
    "plugins": (
        "PluginRun", "make_plugins", "plugin_signature", "scaffold_plugin", "run_python_op", "plugin_builds_allowed",
        "build_plugin", "plugin_kernel_known", "custom_op_names", "PYTHON_PLUGIN_TARGETS", "plugin_targets",
        "read_plugin_code", "render_python_impl", "zip_folder",
    ),
    "profile": (
        "Profile", "profile", "openvino_ir_target", "profile_generation", "find_nsys", "nsys_plan",
        "run_nsys", "ProfileOptions", "ProfileTarget", "profile_options", "GenerationOptions",
        "parse_engines", "parse_engine", "engine_label",
    ),
    "verify": (
        "compare", "precision", "PRECISION_VARIANTS", "default_precision_variants",
    ),
    "export": (
        "export", "EXPORT_TARGETS", "MOBILE_TARGETS", "OV_PRECISIONS", "CALIBRATION_METHODS", "ORT_LEVELS",
        "parse_shape_spec", "export_target_rows", "export_artifact_rows",
        "export_bench_rows",
    ),
    "projects": (
        "input_run", "shared_mode", "projects_root", "create_project", "list_projects", "open_project",
        "project_for_model", "rename_project", "duplicate_project", "delete_project", "export_project",
        "import_project", "project_models", "project_model", "add_model", "model_for", "add_version",
        "list_versions", "record_artifact", "project_artifacts", "project_datasets", "project_jobs",
        "get_settings", "set_setting", "job",
    ),
    "data": (
        "add_dataset", "add_dataset_upload", "sample_photos_folder", "dataset", "remove_dataset",
        "dataset_damage", "preview_dataset", "dataset_inputs_file", "suggest_preprocessing",
        "preprocessing_recipe", "recipe_from_json", "recipe_fields", "recipe_choices", "set_dataset_recipe",
        "dataset_with_recipe", "preview_dataset_samples", "evaluate_on_dataset", "output_tasks",
        "stored_output_tasks", "set_output_tasks", "output_task_kinds", "task_targets", "target_direction",
        "task_choices", "OUTPUT_TASKS", "parse_task_options",
    ),
    "engines": ("engines",),
    "charts": (
        "layer_error_figure", "tradeoff_figure",
    ),
}
_ROOM_OF = {name: room for room, names in _ROOMS.items() for name in names}

__all__ = ["Finding", "FindingGroup", "ModelHandle", "Report", "StudioError", "UploadedFile", "Version",
           "Workspace", *_ROOM_OF]


def __getattr__(name: str) -> Any:
    """A facade name of a room not imported yet: import the room, keep all of its names here (PEP 562)."""
    room = _ROOM_OF.get(name)
    if room is None:
        raise AttributeError(f"module 'studio.api' has no attribute {name!r}")
    module = importlib.import_module(f"studio.facade.{room}")
    globals().update({n: getattr(module, n) for n in _ROOMS[room]})
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ROOM_OF))
