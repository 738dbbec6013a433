"""What the front ends call for batch runs and remote targets.

``studio.batch`` is a consumer of the facade, like the CLI: every stage it runs, here or on a
Dask worker, goes through ``studio.api``. So ``studio.api`` never imports this package (the
import-linter contracts in pyproject.toml), and the pages and the CLI reach batch runs, remote
targets and the cluster's configuration through this module only.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from studio.batch.executors import ClusterSecurity, DaskExecutor, LocalExecutor, cluster_address
from studio.batch.remote import LOCAL, Measured, measure_on, run_here, side_by_side
from studio.batch.remote import cluster_targets as _targets
from studio.batch.results import BatchResult
from studio.batch.runner import run_batch, skipped_summary
from studio.batch.stages import machine_facts, worker_facts
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import ModelHandle
from studio.core import outputs
from studio.core.requests import (BatchRequest, CheckRequest, GenerationRequest, OptimizeRequest, PrecisionRequest,
                                  ProfileRequest)
from studio import api
from studio.core.paths import check_regular_file, user_data_path

__all__ = ["LOCAL", "Measured", "batch", "check_on", "generate_on", "cluster_address", "cluster_targets", "configured_cluster", "machine_facts",
           "optimize_on", "precision_on", "profile_on", "read_stage_requests", "side_by_side", "skipped_summary"]

_TLS = tuple[str | None, str | None, str | None]


def batch(paths: Sequence[str | Path], out_dir: str | Path, request: BatchRequest | None = None, *,
          stages: Sequence[str] = ("inspect", "check"),
          cluster: str | None = None, target: str | None = None, retries: int = 1, workers: int | None = None,
          force: bool = False, stage_options: Mapping[str, Mapping] | None = None,
          tls: _TLS = (None, None, None),
          on_progress: Callable | None = None, on_outcome: Callable | None = None,
          pool_key: str = "batch") -> BatchResult:
    """Run ``stages`` over every model under ``paths`` into ``out_dir`` (resumable; ``force`` reruns),
    on a local pool of sandbox workers or, with ``cluster`` (or ONNX_STUDIO_CLUSTER), on Dask.
    ``target`` runs optimize/precision/profile (``stages.ON_TARGET``) on the cluster worker with resource
    ``target-NAME``. The local
    pool's sandbox workers are named after ``pool_key`` (a browser session's) and stopped at the end.
    ``request`` (a ``BatchRequest``: what the CLI and the Batch page build) gives the stages, ``force`` and the
    stage options in place of those keywords."""
    if request is not None:
        stages, force, stage_options = request.stages, request.force, request.stage_options()
    if target == LOCAL:             # "local" is this machine, as every other --target reads it
        target = None
    address = cluster_address(cluster)
    if address and request is not None and request.local_files():
        raise StudioError(f"the stage requests name files on this machine ({', '.join(request.local_files())[:120]}), "
                          "which a cluster worker cannot read; run this batch without --cluster",
                          code=ErrorCode.BAD_OPTION)
    if target and address is None:
        raise StudioError("--target needs a cluster (--cluster tcp://HOST:PORT or ONNX_STUDIO_CLUSTER)",
                          code=ErrorCode.BAD_OPTION)
    executor = (DaskExecutor(address, retries=retries, security=ClusterSecurity.from_env(*tls)) if address
                else LocalExecutor(workers, pool_prefix=pool_key))
    try:
        return run_batch(paths, out_dir, stages=stages, executor=executor, force=force,
                         stage_options={k: dict(v) for k, v in (stage_options or {}).items()}, target=target,
                         on_progress=on_progress, on_outcome=on_outcome)
    finally:
        executor.close()


def configured_cluster() -> str | None:
    """The Dask scheduler address from configuration (ONNX_STUDIO_CLUSTER, set by ``serve --cluster``),
    validated; None when no cluster is configured. Never from a model or an upload."""
    return cluster_address(None)


def cluster_targets(cluster: str | None = None, *, tls: _TLS = (None, None, None)) -> list[str]:
    """Names of the remote targets (workers with resource ``target-NAME``) of ``cluster``
    (or ONNX_STUDIO_CLUSTER)."""
    return _targets(cluster, ClusterSecurity.from_env(*tls))


def profile_on(targets: Sequence[str], models: Sequence[ModelHandle | tuple[str, ModelHandle]],
               request: ProfileRequest, *, cluster: str | None = None, tls: _TLS = (None, None, None),
               pool_key: str = "default") -> list[Measured]:
    """``request`` (a ``ProfileRequest``) of ``models`` on each target: every target, "local" (this machine)
    included, receives the request as JSON and rebuilds it (``studio.batch.remote.run_request``); another
    name runs it on the cluster worker with resource ``target-NAME``, in the studio's sandbox there, with its
    inputs/images sent along. Each ``Measured`` says who measured it and what request it ran."""
    pairs = _pairs(models)
    out = []
    for target in dict.fromkeys(targets):
        if target == LOCAL:
            out.append(run_here("profile", pairs, request, pool_key=pool_key))
        else:
            o = request.options
            data = {"inputs": o.inputs_npz and user_data_path(o.inputs_npz, label="inputs file"),
                    "images": o.images_dir and user_data_path(o.images_dir, label="image folder")}
            out.append(measure_on("profile", target, [(label, h.path) for label, h in pairs],
                                  {"request": request.to_dict()}, cluster=cluster,
                                  data={k: Path(v) for k, v in data.items() if v},
                                  security=ClusterSecurity.from_env(*tls)))
    return out


def check_on(target: str, handle: ModelHandle | str | Path, request: CheckRequest, *, cluster: str | None = None,
             tls: _TLS = (None, None, None), pool_key: str = "default") -> Measured:
    """``request`` (a ``CheckRequest``) on ``target``, as :func:`profile_on` runs a profile: "local" here,
    another name on the cluster worker offering it (its real-inputs .npz sent along); the far end rebuilds
    the request from JSON either way."""
    h = handle if isinstance(handle, ModelHandle) else api.load(handle)
    if target == LOCAL:
        return run_here("check", [("model", h)], request, pool_key=pool_key)
    data = {"inputs": user_data_path(request.inputs, label="inputs file")} if request.inputs else {}
    return measure_on("check", target, [("model", h.path)], {"request": request.to_dict()}, data=data,
                      cluster=cluster, security=ClusterSecurity.from_env(*tls))


def optimize_on(target: str, handle: ModelHandle | str | Path, request: OptimizeRequest, *, out_path: str | Path,
                partial: str | Path | None = None, dump_dir: str | Path | None = None, cluster: str | None = None,
                tls: _TLS = (None, None, None), pool_key: str = "default") -> Measured:
    """``request`` (an ``OptimizeRequest``) on ``target``, as :func:`check_on` runs a check, with the optimized
    model coming back to ``out_path`` (and the last verified model to ``partial`` when the run does not
    finish; None: nowhere). "local" makes the same JSON trip and writes there directly; another name sends the
    model (and its verification inputs) to the worker offering it, which runs the same pipeline, verifying on
    its own engine, and sends the result back (``studio.batch.remote.land_model``). ``Measured.result`` is the
    ``PipelineResult`` with ``output`` here and ``request`` the request the far end ran."""
    h = handle if isinstance(handle, ModelHandle) else api.load(handle)
    out = Path(out_path)
    if target == LOCAL:
        return run_here("optimize", [("model", h)], request, pool_key=pool_key, out_path=out,
                        partial=partial if partial is not None else "none", dump_dir=dump_dir)
    if dump_dir is not None:
        raise StudioError("--dump-dir keeps every pass's model on the machine that runs it; run it without a remote "
                          "--target NAME", code=ErrorCode.BAD_OPTION)
    outputs.register_input(h.path, *h.external_files)      # the result never lands on the input or its data
    for path in filter(None, (out, partial and Path(partial))):
        outputs.check_destination(path)
        outputs.check_destination(path.with_name(path.name + ".data"))
    if partial is not None and Path(partial).parent.resolve() != out.parent.resolve():
        raise StudioError("with --target the partial model goes next to -o", code=ErrorCode.BAD_OPTION)
    data = {"inputs": user_data_path(request.inputs, label="inputs file")} if request.inputs else {}
    return measure_on("optimize", target, [("model", h.path)],
                      {"request": request.to_dict(), "output": out.name,
                       "partial": Path(partial).name if partial is not None else None},
                      data=data, cluster=cluster, security=ClusterSecurity.from_env(*tls), land_in=out.parent)


def _pairs(models: Sequence[ModelHandle | tuple[str, ModelHandle]]) -> list[tuple[str, ModelHandle]]:
    return [(m.name, m) if isinstance(m, ModelHandle) else (str(m[0]), m[1]) for m in models]


def generate_on(targets: Sequence[str], models: Sequence[ModelHandle | tuple[str, ModelHandle]],
                request: GenerationRequest, *, cluster: str | None = None, tls: _TLS = (None, None, None),
                pool_key: str = "default") -> list[Measured]:
    """``request`` (a ``GenerationRequest``: a decoder's generation profile) of ``models`` on each target, as
    :func:`profile_on` runs a ``ProfileRequest``: every target, "local" included, receives it as JSON and
    rebuilds it (``studio.batch.remote.run_request``); each ``Measured`` says who measured it and what ran."""
    pairs = _pairs(models)
    out = []
    for target in dict.fromkeys(targets):
        if target == LOCAL:
            out.append(run_here("generate", pairs, request, pool_key=pool_key))
        else:
            out.append(measure_on("generate", target, [(label, h.path) for label, h in pairs],
                                  {"request": request.to_dict()}, cluster=cluster,
                                  security=ClusterSecurity.from_env(*tls)))
    return out


def precision_on(target: str, handle: ModelHandle | str | Path, request: PrecisionRequest, *,
                 cluster: str | None = None, tls: _TLS = (None, None, None), dataset=None,
                 out_dir: str | Path | None = None, pool_key: str = "default", on_progress: Callable | None = None,
                 on_tick: Callable | None = None) -> Measured:
    """``request`` run on ``target``, as :func:`check_on` runs a check: "local" makes the same trip as a
    worker (JSON and back, ``studio.batch.remote.run_request``) and runs it here with ``dataset``, ``out_dir``
    and the callbacks, which are this run's, not the request's; another name ships the whole request
    (``to_dict``) with its calibration/inputs files, hashed, to the cluster worker offering it, which
    rebuilds the same request and runs it there. A ``Measured`` labelled with the machine that timed it
    and carrying the request the far end ran."""
    if target == LOCAL:
        h = handle if isinstance(handle, ModelHandle) else api.load(handle)
        return run_here("precision", [("model", h)], request, pool_key=pool_key, dataset=dataset, out_dir=out_dir,
                        on_progress=on_progress, on_tick=on_tick)
    if out_dir is not None:
        raise StudioError("--out keeps variant models on this machine; with --target they stay on the target",
                          code=ErrorCode.BAD_OPTION)
    if request.dataset is not None or dataset is not None:
        raise StudioError("--dataset is judged on this machine; run it without a remote --target NAME",
                          code=ErrorCode.BAD_OPTION)
    data = {"calibration": user_data_path(request.calibration, label="calibration data") if request.calibration
            else None, "inputs": user_data_path(request.inputs, label="inputs file") if request.inputs else None}
    path = handle.path if isinstance(handle, ModelHandle) else api.load(handle).path
    return measure_on("precision", target, [("model", path)], {"request": request.to_dict()}, data=data,
                      cluster=cluster, security=ClusterSecurity.from_env(*tls))


def read_stage_requests(path: str | Path) -> dict:
    """``--stage-requests FILE``: {stage: that stage's request options} from a .json or .toml file (each
    stage's keys are its request's ``to_dict`` keys; ``BatchRequest`` checks them)."""
    p = user_data_path(path, label="stage requests file")
    check_regular_file(p, max_bytes=4 * 2**20, label="stage requests file")
    try:
        text = p.read_text(encoding="utf-8")
        data = tomllib.loads(text) if p.suffix.lower() == ".toml" else json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise StudioError(f"the stage requests file is not valid {'TOML' if p.suffix.lower() == '.toml' else 'JSON'}: "
                          f"{str(exc).splitlines()[0][:120]}", code=ErrorCode.BAD_REQUEST) from None
    if not isinstance(data, dict):
        raise StudioError("the stage requests file must hold an object {stage: {option: value}}",
                          code=ErrorCode.BAD_REQUEST)
    return data
