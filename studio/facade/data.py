"""Datasets, preprocessing recipes, output tasks and task metrics.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TYPE_CHECKING

from sample_models.photos import PHOTO_DIR
from studio.core import outputs, preprocess as pp
from studio.core.feeds import save_npz
from studio.core.model import load as _load, ModelHandle
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.paths import safe_name
from studio.core.requests import DatasetAddRequest, DatasetEvalRequest, RecipeRequest
from studio.core.preprocess import (
    ALLOWED,
    preset as _preset,
    PRESETS,
    read_recipe_file,
    Recipe,
    recipe_from_json as _parse,
    recipe_with,
)
from studio.core.preprocess_suggest import suggest_recipe
from studio.data.datasets import dataset_feeds, source_path, with_recipe
from studio.data.evaluate import evaluate, golden_outputs, output_specs
from studio.data.metrics import DERIVED_METRICS, applicable_targets, check_target, METRICS, parse_target
from studio.data.preview import preview_samples
from studio.data.project_data import (
    add_dataset as _add,
    dataset_damage as _damage,
    get_dataset,
    remove_dataset as _rm,
)
from studio.data.tasks import (
    check_overrides,
    output_tasks as _tasks,
    parse_task_options,
    SETTING,
    TASKS,
    TASKS as OUTPUT_TASKS,
)
from studio.facade.inspect import path_of
from studio.facade.projects import model_for, open_project, project_of

if TYPE_CHECKING:
    from studio.projects import Project

__all__ = [
    "add_dataset", "add_dataset_upload", "sample_photos_folder", "dataset", "remove_dataset",
    "dataset_damage", "preview_dataset", "dataset_inputs_file", "suggest_preprocessing",
    "preprocessing_recipe", "recipe_from_json", "recipe_fields", "recipe_choices", "set_dataset_recipe",
    "dataset_with_recipe", "preview_dataset_samples", "evaluate_on_dataset", "output_tasks",
    "stored_output_tasks", "set_output_tasks", "output_task_kinds", "task_targets", "target_direction",
    "task_choices", "OUTPUT_TASKS", "parse_task_options",
]


def add_dataset(project: Project | str, source: str | Path, request: DatasetAddRequest | None = None, *,
                name: str | None = None, kind: str = "auto",
                model: ModelHandle | None = None, preset: str | None = None, calibration_fraction: float = 0.5,
                seed: int = 0, tokenizer: str | Path | None = None, options: Mapping[str, Any] | None = None,
                recipe=None, recipe_reason: str | None = None, create: bool = False):
    """Import a folder/zip of images, WAV audio, text, tensors or a data-loader script into the
    project; ``model`` suggests the preprocessing (``preset`` overrides it: imagenet, caffe, yolo,
    clip, text-strip, grayscale, raw; ``recipe``, a :func:`preprocessing_recipe`, overrides both).
    Unreadable files are skipped and listed.

    ``request``: the ``DatasetAddRequest`` the CLI and the Data page build (name, kind, preset, split, seed,
    tokenizer, reader options, the model it names and its recipe options), in place of those keywords (both
    at once is one line, BAD-REQUEST); ``model`` is the request's model as this process opened it (opened
    here from the request's path when not given), and a ``recipe`` given beside it replaces the request's.
    ``create``: a project named ``project`` is made when there is none, after the source and the recipe
    were checked (a refused add leaves no project behind)."""
    if request is not None:
        given = [k for k, v, d in (("name", name, None), ("kind", kind, "auto"), ("preset", preset, None),
                                   ("calibration_fraction", calibration_fraction, 0.5), ("seed", seed, 0),
                                   ("tokenizer", tokenizer, None), ("options", options, None)) if v != d]
        if given:
            raise StudioError(f"add_dataset takes its options from the request or from keywords, not both "
                              f"(also given: {', '.join(given)})", code=ErrorCode.BAD_REQUEST)
        name, kind, preset, calibration_fraction = request.name, request.kind, request.preset, request.split
        seed, tokenizer, options = request.seed, request.tokenizer, request.options
        if model is None and request.model:
            model = _load(request.model)
        if recipe is None and request.recipe.given(request.recipe_file):
            recipe, recipe_reason = _recipe_of_request(request, model, recipe_reason)
    source_path(source)
    if create and isinstance(project, str):
        project = open_project(project, create=True)
    return _add(project_of(project), source, name=name, kind=kind, model=model.proto if model else None,
                recipe=recipe if recipe is not None else _preset(preset) if preset else None,
                recipe_reason=recipe_reason, calibration_fraction=calibration_fraction, seed=seed,
                tokenizer=tokenizer, options=options)


def _recipe_of_request(request: DatasetAddRequest, model: ModelHandle | None, said: str | None):
    """(recipe, reason) from a ``data add`` request's recipe options: its file, else its fields over the preset,
    the model's suggestion or plain RGB 0..1 (the reason names which); ``said`` replaces the reason's start."""
    if request.preset:
        base, why = preprocessing_recipe(file=request.preset), f"preset {request.preset}"
    elif model is not None:
        base, why = suggest_preprocessing(model)
        why = f"the model's suggestion ({why})"
    else:
        base, why = None, "plain RGB 0..1"
    recipe = preprocessing_recipe(base, file=request.recipe_file, changes=request.recipe)
    said = said or f"set in the request: {request.recipe.given(request.recipe_file)}"
    return recipe, said + ("" if request.recipe_file else f", on {why}")


def add_dataset_upload(project: Project | str, filename: str, data: bytes, request: DatasetAddRequest | None = None,
                       **kwargs):
    """:func:`add_dataset` for bytes uploaded through the browser (a zip, an .npz, a .jsonl or a
    loader .py): staged in the project's scratch folder, imported, then removed. Unnamed, the dataset is
    named after the file."""
    p = project_of(project)
    folder = outputs.scratch_dir(p.scratch_dir("upload"), "dataset-")
    try:
        name = safe_name(Path(filename.replace("\\", "/")).name, default="dataset.zip")
        staged = outputs.write_bytes(folder / name, data)
        if request is not None:
            return add_dataset(p, staged, request if request.name else replace(request, name=Path(name).stem),
                               **kwargs)
        kwargs.setdefault("name", Path(name).stem)
        return add_dataset(p, staged, **kwargs)
    finally:
        outputs.remove_scratch(folder)


def sample_photos_folder() -> Path:
    """The free photos that ship with the studio (``sample_models/photos``), to try datasets on."""
    return PHOTO_DIR


def dataset(project: Project | str, id_or_name: str):

    return get_dataset(project_of(project), id_or_name)


def remove_dataset(project: Project | str, id_or_name: str) -> str | None:
    """Delete the dataset (its row and its own folder). A damaged row that points outside the
    project is removed and nothing is deleted; the returned note says so (None otherwise)."""
    return _rm(project_of(project), id_or_name)


def dataset_damage(project: Project | str, row) -> str | None:
    """Why a dataset row (:func:`project_datasets`) does not point at the project's own folder, or None."""
    return _damage(project_of(project), row)


def preview_dataset(ds, handle: ModelHandle, count: int = 4, part: str = "all") -> list[dict]:
    """The first ``count`` samples as the model will get them (after preprocessing)."""
    return dataset_feeds(ds, handle.proto, part=part, limit=count)


def dataset_inputs_file(ds, handle: ModelHandle, path: str | Path, *, count: int = 1,
                        part: str = "evaluation") -> Path:
    """The first ``count`` samples of ``part`` as an .npz of model inputs (what ``--inputs`` takes)."""
    return save_npz(dataset_feeds(ds, handle.proto, part=part, limit=count), Path(path))


def suggest_preprocessing(handle: ModelHandle):
    """(recipe, reason) the model suggests for image datasets; the reason names the evidence
    (input layout and dtype, normalization in the graph, metadata) or says it is a guess."""
    return suggest_recipe(handle.proto)


def preprocessing_recipe(base=None, *, file: str | Path | None = None,
                         changes: Mapping[str, Any] | RecipeRequest | None = None):
    """A preprocessing recipe: ``file`` (a JSON recipe file, or a preset name) or else ``base``
    (default: plain RGB 0..1), with ``changes`` {field: value} on top (strings as typed on the CLI
    or the page: ``{"color": "BGR", "mean": "103.94,116.78,123.68", "scale": "1"}``; or the
    ``RecipeRequest`` holding them). Errors are one line naming the field and its allowed values."""
    if isinstance(changes, RecipeRequest):
        changes = changes.changes
    if file is not None:
        base = PRESETS[str(file)] if str(file) in PRESETS and not Path(file).is_file() else read_recipe_file(file)
    return recipe_with(base if base is not None else Recipe(), changes or {})


def recipe_from_json(text: str, label: str = "recipe file"):
    """A recipe from the text of a JSON recipe file (an upload on the page)."""
    return _parse(text, label)


def recipe_fields() -> Mapping[str, str]:
    """Each recipe field and what it takes (for help texts)."""
    return dict(ALLOWED)


def recipe_choices() -> Mapping[str, tuple[str, ...]]:
    """The allowed values of the recipe's choice fields, and the preset names."""
    return {"preset": tuple(pp.PRESETS), "resize": pp.RESIZE_MODES, "color": pp.COLORS, "layout": pp.LAYOUTS,
            "dtype": pp.DTYPES, "interpolation": pp.INTERPOLATIONS}


def set_dataset_recipe(ds, recipe, *, reason: str = "set by the user"):
    """Store ``recipe`` as the dataset's preprocessing (image datasets); returns the dataset."""
    return with_recipe(ds, recipe, reason=reason)


def dataset_with_recipe(ds, recipe, *, reason: str = "given for this run"):
    """The dataset with ``recipe`` for one run, not saved (golden outputs are kept per recipe)."""
    return with_recipe(ds, recipe, reason=reason, save=False)


def preview_dataset_samples(ds, handle: ModelHandle, count: int = 4, part: str = "all"):
    """The first ``count`` samples after preprocessing: shape, dtype, per-channel min/max/mean
    and a thumbnail (:class:`studio.data.preview.PreviewSample`)."""
    return preview_samples(ds, handle.proto, count=count, part=part)


def evaluate_on_dataset(ds, reference: ModelHandle | str | Path | DatasetEvalRequest,
                        candidate: ModelHandle | str | Path | None = None,
                        *, engine: str = "onnxruntime", target: str | None = None, part: str = "evaluation",
                        limit: int | None = None, metrics: Mapping[str, Sequence[str]] | None = None,
                        pool_key: str = "default", tasks: Mapping[str, str] | None = None,
                        model: ModelHandle | None = None):
    """Task metrics of ``candidate`` (default: the reference itself) on ``engine`` against the
    reference's golden outputs on the dataset (computed once and stored with the dataset).
    ``tasks``: {output: kind} chosen by the user (see :func:`output_tasks`); a ``target`` that applies
    to no output is refused before anything runs.

    ``reference`` may be the ``DatasetEvalRequest`` the CLI and the Data page build: its model, candidate,
    engine, goal, part, limit, tasks and recipe options (for this run, over the dataset's), in place of those
    arguments (both at once is one line, BAD-REQUEST); ``tasks`` given
    beside it are the call's resolved choices (the request's with the project's stored ones), ``model`` the
    reference as this process opened it (a page's current version; the request names it by file name)."""
    if isinstance(reference, DatasetEvalRequest):
        request = reference
        given = [k for k, v, d in (("candidate", candidate, None), ("engine", engine, DatasetEvalRequest().engine),
                                   ("target", target, None), ("part", part, "evaluation"), ("limit", limit, None))
                 if v != d]
        if given:
            raise StudioError(f"evaluate_on_dataset takes its options from the request or from arguments, not "
                              f"both (also given: {', '.join(given)})", code=ErrorCode.BAD_REQUEST)
        reference = model if model is not None else request.model
        candidate, engine, target = request.candidate, request.engine, request.goal
        part, limit = request.part, request.limit
        tasks = dict(request.tasks) if tasks is None else tasks
        typed = request.recipe.given(request.recipe_file)
        if typed:                           # the request's recipe for this run (not saved), over the dataset's
            ds = dataset_with_recipe(ds, preprocessing_recipe(ds.recipe, file=request.recipe_file,
                                                              changes=request.recipe),
                                     reason=f"given for this run: {typed}")
    ref = path_of(reference)
    goal = checked_target(target, reference, tasks, ds)
    golden = golden_outputs(ds, ref, part=part, limit=limit, pool_key=pool_key, tasks=tasks)
    cand = path_of(candidate) if candidate is not None else ref
    return evaluate(ds, golden, cand, engine=engine, target=goal, metrics=metrics, pool_key=pool_key,
                    inputs_model=ref)


def checked_target(target: str | None, model: ModelHandle | str | Path, tasks: Mapping[str, str] | None,
                    ds=None):
    """The parsed task-metric ``target``, refused with a one-line error (before any work) when it
    applies to no output of ``model`` with these tasks, or needs labels ``ds`` lacks."""
    if not target:
        return None

    goal = parse_target(target)
    proto = model.proto if isinstance(model, ModelHandle) else _load(model).proto
    labels = None if ds is None else any(s.label is not None for s in ds.samples)
    check_target(goal, output_specs(proto, tasks), has_labels=labels)
    return goal


def output_tasks(handle: ModelHandle, tasks: Mapping[str, str] | None = None, *,
                 project: Project | str | None = None):
    """The task of every output (``studio.data.tasks.OutputTask``: kind and the one-line reason),
    inferred from the graph, then the ``project``'s stored choices, then ``tasks`` {output: kind}."""
    stored = stored_output_tasks(project, handle) if project is not None else None
    return tuple(_tasks(handle.proto, tasks, stored=stored).values())


def stored_output_tasks(project: Project | str, handle: ModelHandle) -> dict[str, str]:
    """The {output: kind} choices the project keeps for the model holding this content."""
    found = project_of(project).find_content(handle.sha256)
    return dict(found[0].settings().get(SETTING) or {}) if found else {}


def set_output_tasks(project: Project | str, handle: ModelHandle, tasks: Mapping[str, str | None]) -> dict[str, str]:
    """Store {output: kind} for the model (added to the project when absent); a kind of None or
    "auto" forgets the choice (back to inference). Returns what is stored now."""
    check_overrides(handle.proto, {k: v for k, v in tasks.items() if v and v != "auto"})
    pm, _version = model_for(project, handle)
    current = dict(pm.settings().get(SETTING) or {})
    for output, kind in tasks.items():
        if kind and kind != "auto":
            current[output] = kind
        else:
            current.pop(output, None)
    pm.set_setting(SETTING, current or None)
    return current


def output_task_kinds() -> tuple[str, ...]:
    """The tasks an output can have (classification, detection, ... other)."""
    return TASKS


def task_targets(handle: ModelHandle, tasks: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The target metrics that apply to at least one output of ``handle`` with these tasks (what a
    page offers), e.g. ("top1-agreement", "top1-accuracy", "cosine", "top1-drop")."""
    return applicable_targets(output_specs(handle.proto, tasks))


def target_direction(metric: str) -> str:
    """">=" for a metric where higher is better (agreement, mAP, cosine), "<=" for errors and drops."""
    return "<=" if metric in DERIVED_METRICS or not METRICS[metric].higher_is_better else ">="


def task_choices(handle: ModelHandle, tasks: Mapping[str, str] | None = None, *,
                 project: Project | str | None = None) -> dict[str, str]:
    """The {output: kind} a run uses: the project's stored choices, then ``tasks`` (which the
    project then keeps for the next run)."""
    given = dict(tasks or {})
    check_overrides(handle.proto, given)
    if project is None:
        return given
    if given:
        return set_output_tasks(project, handle, given)
    return stored_output_tasks(project, handle)

