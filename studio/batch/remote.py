"""Profile, check, precision and optimize on a remote target: the Dask worker with resource ``target-NAME``.

The client packs the model(s) and any data files (calibration, inputs) into one tar,
sends it with its sha256 and each model's sha256; the worker re-hashes the tar and
every model before running anything, and refuses a mismatch. The measuring runs
through the facade on the worker, so it still happens inside the studio's sandbox
worker there. The result comes back with the facts of the process that measured it
(host, pid, Dask worker address, target name, CPU model, cores, engine versions):
every figure is labelled with the machine it came from. Target ``local`` runs here.

An optimize run also sends its model back: the optimized model and its external data as bytes in the answer
(up to ``ONNX_STUDIO_REMOTE_RETURN_MAX_BYTES``, default 2 GiB); above that, written under the folder the
target declares shared with its clients (``ONNX_STUDIO_SHARED_DIR``, ``onnx-studio worker --shared-dir``),
which the client copies from and then empties, or else held in the worker's cache, which the client pulls in
chunks (``ONNX_STUDIO_REMOTE_CHUNK_BYTES``, default 64 MiB) from that very worker and then drops. Every file
is hash-checked as it is written here.
"""

from __future__ import annotations

import hashlib
import io
import dataclasses
import json
import os
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.batch.executors import (ClusterSecurity, DaskExecutor, data_arcname, model_files, cluster_address,
                                   cluster_timeout_s, content_hash)
from studio.batch.retrying import ClusterLost, announce_start
from studio.batch.stages import worker_facts
from studio.core.error_codes import ErrorCode
from studio.core import outputs
from studio.core.errors import StudioError
from studio.core.fmt import human_bytes
from studio.core.requests import CheckRequest, GenerationRequest, OptimizeRequest, PrecisionRequest, ProfileRequest
from studio.core.model import load, sha256_file
from studio import api

LOCAL = "local"
KINDS = ("profile", "precision", "generate", "check", "optimize")
REQUEST_OF = {"profile": ProfileRequest, "precision": PrecisionRequest, "check": CheckRequest,
              "generate": GenerationRequest, "optimize": OptimizeRequest}   # kind -> its request
RETURN_MAX_BYTES = 2 * 2**30        # what a target sends back in its answer (ONNX_STUDIO_REMOTE_RETURN_MAX_BYTES)


@dataclass(frozen=True)
class Measured:
    """A result (``Profile``, ``GenerationProfile``, ``PrecisionReport`` or a check ``Report``) and who
    measured it; ``request`` is the request as the far end rebuilt it and ran it."""

    target: str
    measured_by: dict = field(default_factory=dict)
    result: Any = None
    request: Any = field(default=None, compare=False)

    @property
    def label(self) -> str:
        m = self.measured_by
        return f"{self.target} ({m.get('host', '?')}, {m.get('cpu', '?')}, {m.get('cores', '?')} cores)"

    def to_dict(self) -> dict:
        return {"target": self.target, "measured_by": dict(self.measured_by), "result": self.result.to_dict()}


def _pack(entries: Mapping[str, Path]) -> bytes:
    """Files and folders under their arc names in one tar (no links followed)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for arc, path in entries.items():
            path = Path(path)
            if path.is_dir():
                for f in sorted(x for x in path.rglob("*") if x.is_file() and not x.is_symlink()):
                    tar.add(str(f), arcname=f"{arc}/{f.relative_to(path)}", recursive=False)
            else:
                tar.add(str(path), arcname=arc, recursive=False)
    return buf.getvalue()


def _load_sha(path: Path) -> str:
    return load(path).sha256


def remote_measure(kind: str, blob: bytes, blob_sha256: str, models: list[tuple[str, str, str]],
                   data: Mapping[str, str], kwargs: dict) -> dict:
    """Runs on the Dask worker: verify the package, then run the request (profile, check, precision, optimize)
    or the generation profile through the facade.

    ``models``: (label, arc name, sha256); ``data``: keyword -> arc name of a data file or folder; an optimize's
    ``kwargs`` also name its result (``output``, ``partial``: plain NAME.onnx, written in this run's scratch).
    Returns {"measured_by", "result", "request"} (optimize: and "returned", :func:`_send_back`) or {"error",
    "code"}; never raises for what arrived."""
    announce_start()
    facts = worker_facts()
    if hashlib.sha256(blob).hexdigest() != blob_sha256:
        return {"error": "the package that arrived does not match its content hash; refusing it",
                "code": ErrorCode.HASH_MISMATCH, "measured_by": facts}
    work = Path(tempfile.mkdtemp(prefix="measure-", dir=_cache()))
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
            tar.extractall(work, filter="data")
        handles = []
        for label, arc, sha in models:
            path = work / arc
            if not path.is_file() or content_hash(path) != sha:
                return {"error": f"model {label[:40]} does not match its content hash; refusing it",
                        "code": ErrorCode.HASH_MISMATCH, "measured_by": facts}
            handles.append((label, api.load(path)))
        extra = {k: work / arc for k, arc in data.items()}
        pool_key = f"remote-{threading.get_ident()}"
        if kind not in REQUEST_OF:
            return {"error": f"unknown measurement {kind[:20]!r}", "code": ErrorCode.BAD_OPTION, "measured_by": facts}
        if kind != "optimize":
            request, result = run_request(kind, handles, kwargs.get("request") or {}, extra, pool_key=pool_key)
            return {"measured_by": facts, "result": result, "request": request.to_dict()}
        out_dir = work / "out"
        out_dir.mkdir()
        partial = kwargs.get("partial")
        request, result = run_request(kind, handles, kwargs.get("request") or {}, extra, pool_key=pool_key,
                                      out_path=out_dir / _plain_name(kwargs.get("output")),
                                      partial=out_dir / _plain_name(partial) if partial else "none")
        return {"measured_by": facts, "result": result, "request": request.to_dict(),
                "returned": _send_back(result.output, facts)}
    except StudioError as exc:
        return {"error": str(exc).splitlines()[0][:300] if str(exc) else "failed", "code": exc.code,
                "measured_by": facts}
    finally:
        shutil.rmtree(work, ignore_errors=True)  # scratch: our temp folder


def run_request(kind: str, handles: Sequence[tuple[str, Any]], wire: Mapping[str, Any],
                files: Mapping[str, Path], *, pool_key: str, **call: Any) -> tuple[Any, Any]:
    """The far end of every trip (a worker's ``remote_measure`` and ``--target local``): the request
    rebuilt from its JSON form (``wire``) and run through the facade as a local run runs it; ``files``
    are where its data files (calibration, inputs, images) are on this machine. ``call``: what belongs to
    this process, not to the request (precision here: the opened ``dataset``, ``out_dir``, the callbacks).
    Returns the rebuilt request (what ran) and the result."""
    request = REQUEST_OF[kind].from_dict(wire)
    if kind == "profile":
        return request, api.profile(list(handles), request, files=files, pool_key=pool_key)
    if kind == "check":
        return request, api.check(handles[0][1], request, files=files, pool_key=pool_key)
    if kind == "generate":             # a decoder's generation profile (profile --generate)
        return request, api.profile_generation(list(handles), request.engines,
                                               api.GenerationOptions(**request.options), pool_key=pool_key)
    if kind == "optimize":             # its verification inputs are where they arrived; the request stays as sent
        ran = dataclasses.replace(request, inputs=str(files["inputs"])) if "inputs" in files else request
        result = api.optimize(handles[0][1], ran, pool_key=pool_key, **call)
        return request, dataclasses.replace(result, request=request)
    return request, api.precision(handles[0][1], request, files=dict(files), pool_key=pool_key, **call)


def _plain_name(name: Any) -> str:
    """A file name the client chose for the result (no folder: the worker writes in its own scratch)."""
    text = str(name or "")
    if not text.endswith(".onnx") or Path(text).name != text or text.startswith("."):
        raise StudioError(f"the result's name must be a plain NAME.onnx, got {text[:60]!r}", code=ErrorCode.BAD_REQUEST)
    return text


def _return_limit() -> int:
    raw = os.environ.get("ONNX_STUDIO_REMOTE_RETURN_MAX_BYTES")
    try:
        return int(raw) if raw else RETURN_MAX_BYTES
    except ValueError:
        return RETURN_MAX_BYTES


def _send_back(model: Path | None, facts: dict) -> dict | None:
    """Worker side: the model the run wrote and its external data (the model last), as {"files": [(name, bytes,
    sha256)]} when they fit the limit; above it, copied under the target's shared folder ({"shared": folder,
    "files": [(name, size, sha256)]}), else kept in this worker's cache for the client to pull in chunks
    ({"held": token, "worker": address, "files": ...}: :func:`read_held`); outside a Dask worker (no one to
    pull from) and with no shared folder: a one-line refusal naming the limit."""
    if model is None:
        return None
    files = model_files(model)
    named = [(data_arcname(model, Path(f)), Path(f)) for key, f in files.items() if key != "model"]
    named.append((model.name, Path(files["model"])))              # the model last: it names the data before it
    total, limit = sum(f.stat().st_size for _, f in named), _return_limit()
    if total <= limit:
        items = []
        for name, f in named:
            data = f.read_bytes()
            items.append((name, data, hashlib.sha256(data).hexdigest()))
        return {"files": items}
    shared = os.environ.get("ONNX_STUDIO_SHARED_DIR")
    if not shared and not facts.get("worker"):
        raise StudioError(f"the optimized model is {human_bytes(total)}, over the {human_bytes(limit)} a target "
                          "sends back in one answer (ONNX_STUDIO_REMOTE_RETURN_MAX_BYTES), and target "
                          f"'{str(facts.get('target'))[:40]}' declares no shared folder (onnx-studio worker "
                          "--shared-dir DIR, mounted at the same path on the client)", code=ErrorCode.TOO_LARGE)
    if shared:
        folder = Path(tempfile.mkdtemp(prefix="optimized-", dir=shared))
    else:
        _drop_stale_held()
        (_cache() / "held").mkdir(exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="", dir=_cache() / "held"))
    try:
        items = []
        for name, f in named:                      # out of the run's scratch (a rename where it can)
            # scratch: out of the run's job folder into the folder made above for this result (mkdtemp)
            shutil.move(f, _child(folder, name))
            items.append((name, _child(folder, name).stat().st_size, sha256_file(_child(folder, name))))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # scratch: this run's own job folder
        raise
    if shared:
        return {"shared": str(folder), "files": items}
    return {"held": folder.name, "worker": facts["worker"], "files": items}


HELD_KEEP_S = 24 * 3600.0           # a held result no client came for is removed after this long


def _held(token: str) -> Path:
    if not token or Path(token).name != token or token.startswith("."):
        raise StudioError("unknown held result", code=ErrorCode.BAD_REQUEST)
    return _cache() / "held" / token


def read_held(token: str, name: str, offset: int, length: int) -> bytes:
    """On the worker that ran an optimize: ``length`` bytes at ``offset`` of a file it holds for the client."""
    with open(_child(_held(token), name), "rb") as fh:
        fh.seek(int(offset))
        return fh.read(int(length))


def drop_held(token: str) -> None:
    """On that worker: the held result's folder removed (the client has it, or gave up)."""
    shutil.rmtree(_held(token), ignore_errors=True)  # scratch: a result folder this worker made in its cache


def _drop_stale_held() -> None:
    import time

    root = _cache() / "held"
    for old in (root.iterdir() if root.is_dir() else ()):
        try:
            if time.time() - old.stat().st_mtime > HELD_KEEP_S:
                shutil.rmtree(old, ignore_errors=True)  # scratch: a held result no client fetched
        except OSError:
            continue


CHUNK_BYTES = 64 * 2**20            # one pull of a held result (ONNX_STUDIO_REMOTE_CHUNK_BYTES)


def _chunk_bytes() -> int:
    raw = os.environ.get("ONNX_STUDIO_REMOTE_CHUNK_BYTES")
    try:
        return max(1, int(raw)) if raw else CHUNK_BYTES
    except ValueError:
        return CHUNK_BYTES


def _file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        yield from iter(lambda: fh.read(4 * 2**20), b"")


def _write_checked(dest: Path, chunks: Iterable[bytes], sha: str, what: str) -> Path:
    """``dest`` written from ``chunks`` through ``outputs.open_output`` (a temp file renamed into place), the
    hash taken on the way: a mismatch leaves nothing at ``dest``."""
    h = hashlib.sha256()
    with outputs.open_output(dest, "wb") as fh:
        for chunk in chunks:
            h.update(chunk)
            fh.write(chunk)
        if h.hexdigest() != sha:
            raise StudioError(f"the model file {dest.name[:60]} {what} was damaged on the way; nothing kept",
                              code=ErrorCode.HASH_MISMATCH)
    return dest


def land_model(result: Any, returned: Mapping[str, Any] | None, folder: Path, target: str,
               pull: Callable[[str, int, int], bytes] | None = None) -> Any:
    """Client side: the files a target sent back written into ``folder`` (bytes in the answer, a folder on the
    shared path, or a held result read through ``pull(name, offset, length)``), each hash checked as it is
    written (nothing of a damaged answer is kept), the model last; the result's ``output`` then names the
    file here."""
    if returned is None or result.output is None:
        return result
    what = f"sent back by target '{target[:40]}'"
    written: list[Path] = []
    try:
        for name, body, sha in returned["files"]:
            dest = _child(folder, name)
            if "shared" in returned:
                source = Path(returned["shared"])
                if not source.is_dir():
                    raise StudioError(f"target '{target[:40]}' wrote the model to its shared folder "
                                      f"{str(source)[:200]}, which this machine cannot read; mount that folder here "
                                      "at the same path", code=ErrorCode.NOT_FOUND)
                chunks: Iterable[bytes] = _file_chunks(_child(source, name))
            elif "held" in returned:
                if pull is None:
                    raise StudioError(f"the model {what} waits on its worker; nothing here can fetch it",
                                      code=ErrorCode.REMOTE)
                step = _chunk_bytes()
                chunks = (pull(name, offset, step) for offset in range(0, int(body), step))
            else:
                chunks = (body,)
            written.append(_write_checked(dest, chunks, sha, what))
        if "shared" in returned:
            shutil.rmtree(returned["shared"], ignore_errors=True)  # scratch: the job folder the worker made there
    except BaseException:
        for f in written:
            # scratch: only the files this answer wrote above (checked new destinations), never the user's
            f.unlink(missing_ok=True)
        raise
    return dataclasses.replace(result, output=_child(folder, Path(result.output).name))


def _child(folder: Path, name: str) -> Path:
    """``folder/name`` for a name that came over the wire: a plain file name (the model, ``NAME.onnx.data``)."""
    if Path(name).name != name or name in ("", ".", ".."):
        raise StudioError(f"a returned file name {name[:60]!r} leaves its folder; refusing it",
                          code=ErrorCode.HASH_MISMATCH)
    return Path(folder) / name


def run_here(kind: str, models: Sequence[tuple[str, Any]], request: Any, *, pool_key: str, **call: Any) -> Measured:
    """``--target local``: the request makes the same trip as to a worker (to JSON and back, rebuilt and run
    by :func:`run_request`), without the package: its files are read where they are; ``call`` (the run's
    own arguments: output folder, callbacks, an opened dataset) stays in this process."""
    wire = json.loads(json.dumps(request.to_dict()))
    received, result = run_request(kind, models, wire, {}, pool_key=pool_key, **call)
    return Measured(LOCAL, worker_facts(LOCAL), result, received)


def _cache() -> Path:
    cache = Path(os.environ.get("ONNX_STUDIO_WORKER_CACHE") or Path(tempfile.gettempdir()) / "onnx-studio-worker")
    cache.mkdir(parents=True, exist_ok=True)
    return cache


def cluster_targets(cluster: str | None = None, security: ClusterSecurity | None = None) -> list[str]:
    """Target names the cluster's workers offer (resources ``target-NAME``)."""
    address = _address(cluster)
    ex = DaskExecutor(address, retries=0, security=security or ClusterSecurity.from_env())
    try:
        return ex.targets()
    finally:
        ex.close()


def _address(cluster: str | None) -> str:
    address = cluster_address(cluster)
    if address is None:
        raise StudioError("--target needs a cluster (--cluster tcp://HOST:PORT or ONNX_STUDIO_CLUSTER)",
                          code=ErrorCode.BAD_OPTION)
    return address


def measure_on(kind: str, target: str, models: Sequence[tuple[str, Path]], kwargs: dict, *,
               data: Mapping[str, Path] | None = None, cluster: str | None = None,
               security: ClusterSecurity | None = None, retries: int = 1, land_in: Path | None = None) -> Measured:
    """Run ``kind`` (profile/precision/check/optimize) of ``models`` [(label, path)] on the worker offering
    ``target``; ``data`` are keyword arguments that name files (calibration, inputs) sent along. An optimize
    run's model comes back into ``land_in`` (:func:`land_model`)."""
    if kind not in KINDS:
        raise StudioError(f"unknown measurement {kind[:20]!r}", code=ErrorCode.BAD_OPTION)
    ex = DaskExecutor(_address(cluster), retries=retries, security=security or ClusterSecurity.from_env())
    try:
        known = ex.targets()
        if target not in known:
            raise StudioError(f"no worker of the cluster offers target '{target[:40]}' (resource "
                              f"target-{target[:40]}); known targets: {', '.join(known) or 'none'}",
                              code=ErrorCode.NO_TARGET)
        entries: dict[str, Path] = {}
        described = []
        for i, (label, path) in enumerate(models):
            files = model_files(Path(path))
            for name, f in files.items():
                arc = f"m{i}/model.onnx" if name == "model" else f"m{i}/{data_arcname(files['model'], Path(f))}"
                entries[arc] = Path(f)
            described.append((str(label), f"m{i}/model.onnx", _load_sha(files["model"])))
        named = {}
        for key, path in (data or {}).items():
            if path is None:
                continue
            named[key] = f"data/{key}" + ("" if Path(path).is_dir() else Path(path).suffix)
            entries[named[key]] = Path(path)
        blob = _pack(entries)
        fut = ex.jobs.submit(remote_measure, kind, blob, hashlib.sha256(blob).hexdigest(), described, named,
                             kwargs, resources={f"target-{target}": 1}, label=f"{kind}-{target}")
        try:
            payload = fut.result().payload
        except ClusterLost as exc:                # retries used up: names the lost worker or scheduler
            raise StudioError(f"the {kind} on target '{target[:40]}' did not finish: {exc}", code=exc.code) from None
        except Exception as exc:  # noqa: BLE001 - a worker-side crash
            raise StudioError(f"the {kind} on target '{target[:40]}' did not finish: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200] if str(exc) else ''}",
                              code=ErrorCode.WORKER_LOST) from None
        if "error" in payload:
            raise StudioError(f"target '{target[:40]}': {payload['error']}",
                              code=payload.get("code") or ErrorCode.REMOTE)
        result = payload["result"]
        if kind == "optimize":
            result = _land_pulled(ex, result, payload.get("returned"), Path(land_in or "."), target)
    finally:
        ex.close()
    received = payload.get("request")
    return Measured(target, payload["measured_by"], result,
                    REQUEST_OF[kind].from_dict(received) if received is not None else None)


def _land_pulled(ex: DaskExecutor, result: Any, returned: Mapping[str, Any] | None, folder: Path, target: str) -> Any:
    """:func:`land_model`, pulling a held result in chunks from the one worker that holds it (each pull pinned
    there, bounded in time), and telling it to drop the result afterwards, landed or not."""
    if not returned or "held" not in returned:
        return land_model(result, returned, folder, target)
    token, worker = str(returned["held"]), str(returned["worker"])
    wait_s = max(60.0, cluster_timeout_s())

    def pull(name: str, offset: int, length: int) -> bytes:
        fut = ex.client.submit(read_held, token, name, offset, length, workers=[worker], allow_other_workers=False,
                               pure=False)
        try:
            return fut.result(timeout=wait_s)
        except Exception as exc:  # noqa: BLE001 - the worker left, or its file went
            raise StudioError(f"the optimized model on target '{target[:40]}' could not be fetched from worker "
                              f"{worker[:60]} ({type(exc).__name__}); nothing kept", code=ErrorCode.WORKER_LOST) from None

    try:
        return land_model(result, returned, folder, target, pull=pull)
    finally:
        try:
            ex.client.submit(drop_held, token, workers=[worker], allow_other_workers=False,
                             pure=False).result(timeout=wait_s)
        except Exception:  # noqa: BLE001 - a worker that left took its cache with it; a stale one is dropped later
            pass


def side_by_side(measured: Sequence[Measured]) -> list[dict]:
    """One row per profile variant, one p50/p90 column pair per target (None where it failed)."""
    rows: dict[str, dict] = {}
    for m in measured:
        for v in m.result.variants:
            row = rows.setdefault(v.id, {"variant": v.id, "label": v.variant.label})
            row[f"p50 ms @{m.target}"] = round(v.latency.p50_ms, 4) if v.latency else None
            row[f"p90 ms @{m.target}"] = round(v.latency.p90_ms, 4) if v.latency else None
    return list(rows.values())
