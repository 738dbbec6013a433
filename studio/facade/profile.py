"""Latency profiles (per engine, per op, generation) and Nsight Systems runs.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from profilers.generation_profile import GenerationOptions, run_generation
from profilers.inputs import prepare_feeds
from profilers.nvtx import find_nsys as _find, nsys_plan as _plan, run_nsys as _run
from profilers.profile import options_limits, options_of as profile_options, Profile, ProfileOptions, run_profile
from profilers.variants import (
    choice_label as engine_label,
    EngineSpec,
    parse_engine,
    parse_engines,
    ProfileTarget,
)
from studio.core.engines.openvino_ir import read_ir
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import ModelHandle
from studio.core.requests import ProfileRequest
from studio.core.workspace import Workspace
from studio.verification.verifier import searched_dims

if TYPE_CHECKING:
    from profilers.generation_profile import GenerationProfile
    from studio.projects import ProjectModel

__all__ = [
    "Profile", "profile", "openvino_ir_target", "profile_generation", "find_nsys", "nsys_plan", "run_nsys",
    "ProfileOptions", "ProfileTarget", "profile_options", "GenerationOptions",
    "parse_engines", "parse_engine", "engine_label",
]


def profile(targets: Sequence[ModelHandle | ProfileTarget | tuple[str, ModelHandle]],
            engines: ProfileRequest | Sequence[str | EngineSpec] | str = ("ort",),
            options: ProfileOptions | None = None, *,
            workspace: Workspace | ProjectModel | None = None, out_dir: Path | None = None, pool_key: str = "default",
            on_progress: Callable[[float, str], None] | None = None,
            files: Mapping[str, str | Path] | None = None) -> Profile:
    """Latency (cold start, warm percentiles, interleaved ratios), and optionally per-op time,
    memory and sweeps, of every model version on every engine (``profilers.profile``).

    ``engines``: specs such as "ort", "ov", "ov:bf16", "trt", or "all". Side files (ORT
    profiles, traces, caches) go to ``out_dir``, else to a job folder of ``workspace``,
    else to a temporary folder removed afterwards. ``on_progress(fraction, message)``
    may raise to stop: the running worker is killed and the exception propagates. ``engines`` may be a
    ``ProfileRequest`` (``studio.core.requests``: what the CLI, the Profile page, batch and remote targets
    build), which brings its own options; ``files`` are where its inputs/images are on this machine.
    """
    if isinstance(engines, ProfileRequest):
        engines, options = list(engines.engines), profile_options(engines, files)
    chosen, specs = _profile_targets(targets), _engine_specs(engines)
    if any(t.openvino_ir is not None for t in chosen):
        raise StudioError("an OpenVINO IR is profiled by its generation loop only (profile --generate, "
                          "api.profile_generation); profile its ONNX model otherwise", code=ErrorCode.BAD_OPTION)
    temporary = out_dir is None and workspace is None
    folder = Path(out_dir) if out_dir is not None else (
        workspace.job_dir("profile") if workspace is not None else Path(tempfile.mkdtemp(prefix="onnx-studio-profile-")))
    options = options or ProfileOptions()
    try:
        result = run_profile(chosen, specs, options, out_dir=folder, pool_key=pool_key, on_progress=on_progress)
        searched = _searched_sizes(chosen[0], options, pool_key) if result.baseline is None else None
        if searched is not None:        # the guessed sizes do not run the original: again at sizes it takes
            dims, text = searched
            result = run_profile(chosen, specs, replace(options, dims=tuple(sorted(dims.items()))), out_dir=folder,
                                 pool_key=pool_key, on_progress=on_progress)
            result = replace(result, warnings=(f"the guessed input sizes do not run the original; profiled at "
                                               f"searched sizes ({text}): set --dim to profile others",
                                               *result.warnings))
    finally:
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)  # scratch: the temp folder made above
    return replace(result, out_dir=None) if temporary else result


def _searched_sizes(target: ProfileTarget, options: ProfileOptions, pool_key: str
                    ) -> tuple[dict[str, int], str] | None:
    """Sizes the original runs at, searched as check, verify, optimize and precision search them, when
    profiling failed on seeded inputs whose sizes were guessed (corpus silero_vad_v5: a reflect Pad of 64
    on 16 samples), under the limits the user set for the profile (--timeout, --memory-gb); None when the
    user gave the inputs or every size, or nothing better is found."""
    if options.inputs_npz or options.images_dir or target.openvino_ir is not None:
        return None
    given = dict(options.dims)
    try:
        prepared = prepare_feeds(target.handle, dims=given, seed=options.seed)
        if not prepared.guessed:
            return None
        return searched_dims(target.handle.path, target.handle.proto, dict(prepared.feeds), dims=given,
                             limits=options_limits(options), pool_key=pool_key)
    except StudioError:     # no ORT session at all: the profile's own errors say why
        return None


def _profile_targets(targets: Sequence[ModelHandle | ProfileTarget | tuple[str, ModelHandle]]) -> list[ProfileTarget]:

    chosen: list[ProfileTarget] = []
    for item in targets:
        if isinstance(item, ProfileTarget):
            chosen.append(item)
        elif isinstance(item, ModelHandle):
            chosen.append(ProfileTarget(item.name, item))
        else:
            label, handle = item
            chosen.append(ProfileTarget(str(label), handle))
    return chosen


def _engine_specs(engines: Sequence[str | EngineSpec] | str) -> list[EngineSpec]:

    specs: list[EngineSpec] = []
    for item in [engines] if isinstance(engines, str) else engines:
        for spec in [item] if isinstance(item, EngineSpec) else parse_engines(item):
            if spec not in specs:
                specs.append(spec)
    return specs


def openvino_ir_target(xml: str | Path, source: ModelHandle, label: str | None = None) -> ProfileTarget:
    """An OpenVINO IR (``.xml`` + ``.bin``, e.g. NNCF int4 ``compress_weights``) of the ONNX decoder ``source``
    as a generation-profile target: OpenVINO runs the IR, ``source`` gives its decoder contract and output
    names. The IR is checked first (:mod:`studio.core.engines.openvino_ir`): a missing or truncated ``.bin``,
    a file that is no IR, is one ``StudioError`` line; names ``source`` has and the IR lacks are refused when
    profiled."""
    ir = read_ir(xml)
    return ProfileTarget(label or ir.xml.name, source, openvino_ir=ir)


def profile_generation(targets: Sequence[ModelHandle | ProfileTarget | tuple[str, ModelHandle]],
                       engines: Sequence[str | EngineSpec] | str = ("ort",),
                       options: GenerationOptions | None = None, *, out_dir: Path | None = None,
                       pool_key: str = "default",
                       on_progress: Callable[[float, str], None] | None = None) -> GenerationProfile:
    """A KV-cache decoder's generation profile (``profilers.generation_profile``): greedy generations
    with the cache fed back (present -> past), per prompt length and batch, every version on every
    engine interleaved: TTFT, decode p50/p99, tokens/s, latency against position, peak memory.
    Raises a one-line ``StudioError`` for a model that is no decoder or a prompt beyond its context."""
    folder = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="onnx-studio-generate-"))
    try:
        return run_generation(_profile_targets(targets), _engine_specs(engines), options or GenerationOptions(),
                              out_dir=folder, pool_key=pool_key, on_progress=on_progress)
    finally:
        if out_dir is None:
            shutil.rmtree(folder, ignore_errors=True)  # scratch: the temp folder made above


def find_nsys() -> str | None:
    """The ``nsys`` (Nsight Systems) executable on PATH, or None."""
    return _find()


def nsys_plan(command: Sequence[str], out_dir: Path, *, nsys: str = "nsys"):
    """The commands that profile ``command`` under nsys into ``out_dir`` (``profilers.nvtx.NsysPlan``)."""
    return _plan(command, out_dir, nsys=nsys)


def run_nsys(plan, *, cwd: Path, env: dict[str, str] | None = None):  # noqa: ANN001 - profilers.nvtx.NsysPlan
    """Run an :func:`nsys_plan` in ``cwd`` and read its kernel statistics (``NsysStats``; not verified here)."""
    return _run(plan, cwd=cwd, env=env)

