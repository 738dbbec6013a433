"""Every request survives every trip (issue 34, item 2): a request with every field set away from its default
(the list of fields read from ``dataclasses.fields``, so a new field fails here until it is covered) goes
to JSON and back, prints a command the real CLI parser reads back into the same request, and reaches the far
end of a remote run equal, field by field: through ``--target local`` (the API door and the CLI door) and
through the worker's own ``remote_measure`` with its files in the hashed package. A local run and a
``--target local`` run of the same check/profile request give the same result structure (real ORT, the
cnn_unfused sample).

Oracles: the request's own fields, the real argparse parser, what the far end's facade call received (a spy
on ``studio.api``), and the plain local run."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex

import pytest

from sample_models.catalog import path_of
from studio import api
from studio.batch import facade as batch_api
from studio.batch.remote import _pack, remote_measure
from studio.cli import (batch_cmd, build_parser, check_cmd, compare_cmd, data_cmd, edit_cmd, export_cmd, graph_cmd,
                        inspect_cmd, main, memory_cmd, optimize_cmd, plugin_cmd, precision_cmd, profile_cmd,
                        profile_generate, recipe_args, remote_args, task_args)
from studio.core.errors import StudioError
from studio.core.requests import (HINT_REQUESTS, REQUESTS, BatchRequest, CheckRequest, CompareRequest,
                                  DatasetAddRequest, DatasetEvalRequest, EditRequest, ExportRequest,
                                  GenerationRequest, GraphRequest, InspectRequest, MemoryRequest, OptimizeRequest,
                                  PluginRequest, PrecisionRequest, ProfileOptions, ProfileRequest, RecipeRequest)

FULL = {
    ProfileRequest: ProfileRequest.of(       # an .npz or an image folder: the image folder (its preprocessing)
        engines=("ort", "ov:bf16"), warmup=3, duration_s=2.5, rounds=7, per_op=True, per_op_runs=4, memory=True,
        memory_iterations=50, thread_counts=(1, 2), batch_sizes=(1, 4), concurrency=(2,), sweep_iterations=9,
        dims={"batch": 1, "seq len": 16}, images_dir="photos dir",
        preprocess={"size": (32, 48), "layout": "NHWC", "mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25),
                    "bgr": True}, seed=5, timeout_s=60.5, memory_gb=1.5, ov_cache=True),
    CheckRequest: CheckRequest(engines=("onnxruntime", "openvino"), eps=("cpu", "cuda"), trt_version="11", run=False,
                               dims={"batch": 2, "seq len": 5}, inputs="real inputs/x.npz",
                               tasks={"logits": "classification"}),
    PrecisionRequest: PrecisionRequest(
        variants=("fp32", "int8", "int8-weights"), calibration="calib dir/calib.npz", calibration_method="entropy",
        samples=3, inputs="eval.npz", target_cosine=0.95, goal="top1-agreement>=0.9", dataset="photos",
        tasks={"logits": "classification"}, dims={"batch": 2, "seq len": 5},
        preprocess={"size": (32, 48), "layout": "NHWC", "mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25),
                    "bgr": True},
        latency_budget_s=7.0, block_size="32", symmetric=False, accuracy_level=4, ratio=0.5, generation_steps=3),
    OptimizeRequest: OptimizeRequest(passes=("fix-input-shapes", "fold-constants"), dims={"batch": 1},
                                      pass_options={"fold-constants": {"max_bytes": 4096}}, on_failure="revert",
                                      verify=False, time_budget_s=90.5, inputs="real inputs/x.npz"),
    ExportRequest: ExportRequest(
        targets=("ort", "openvino"), preset="safe", precision="int8", ov_precisions=("fp32", "fp16"),
        calibration="calib dir", calibration_method="entropy", shapes=("input ids=1x8:2x16:4x64", "mask=1x8"),
        dims={"batch": 2}, ort_level="basic", ort_format=False, name="my bundle", max_batch=4,
        plugins=("libs/trt plugin.so",), ort_custom_ops=("libs/ort ops.so",), ov_extensions=("libs/ov.so",),
        zip=False, goal="top1-agreement>=0.99", dataset="photos", tasks={"logits": "classification"}),
    MemoryRequest: MemoryRequest(dims={"batch": 2, "seq len": 5}, measure=False, engine_graph=False, reorder=True,
                                 measure_timeout_s=30),
    EditRequest: EditRequest(operations=[{"op": "rename", "tensors": {"a": "b"}},
                                         {"op": "set_attr", "node": "conv 1", "name": "alpha", "value": 0.5}],
                             verify=False, check_only=True),
    BatchRequest: BatchRequest(stages=("check", "profile", "export"), engines=("onnxruntime", "openvino"), force=True,
                               stage_requests={"check": {"run": False, "trt_version": "11", "dims": {"batch": 2}},
                                               "export": {"targets": ["ort", "openvino"], "max_batch": 4,
                                                          "name": "my bundle"}}),
    GenerationRequest: GenerationRequest(engines=("ort", "ov:bf16"), prompt_lengths=(4, 8), new_tokens=3,
                                         batch_sizes=(1, 2), generations=2, seed=7, io_binding=False, memory=False,
                                         timeout_s=30.5, memory_gb=1.5),
    # the operations that run here only (no batch stage, no remote target): the CLI and the page build these too
    CompareRequest: CompareRequest(engine="openvino", engine_b="ov", ov_precision="bf16", ov_precision_b="f16",
                                   dims={"batch": 2, "seq len": 5}, inputs="real inputs/x.npz", images="photo dir",
                                   dataset="photos", layerwise=True, layer_threshold=0.25,
                                   tasks={"logits": "classification"}, goal="top1-agreement>=0.9"),
    GraphRequest: GraphRequest(dims={"batch": 1, "seq len": 8}, level=2, overlay="numeric error", search="conv 1",
                               focus="node 7", hops=3, group="/encoder/layer.0", diff_mode="side-by-side",
                               renderer="boxes"),
    InspectRequest: InspectRequest(dims={"batch": 1, "seq len": 8}, decoder=True, kv_length=4096, batch=4,
                                   memory_gib=16e9 / 2**30, kv_dtype="fp16"),
    DatasetAddRequest: DatasetAddRequest(name="val images", kind="text", model="my model.onnx", preset="caffe",
                                         split=0.25, seed=3, tokenizer="tok dir/tokenizer.json", seq_len=64,
                                         length=16000, recipe_file="my recipe.json",
                                         recipe=RecipeRequest(fields={"resize": "letterbox", "size": "320x320",
                                                                      "mean": "0, 0,0", "color": "BGR",
                                                                      "pad_value": "114"})),
    DatasetEvalRequest: DatasetEvalRequest(model="my model.onnx", engine="openvino", goal="top1-agreement>=0.99",
                                           tasks={"logits": "classification"}, candidate="cand v2.onnx", part="all",
                                           limit=7, recipe_file="imagenet",
                                           recipe=RecipeRequest(fields={"scale": "1/255", "std": "1,1,1",
                                                                        "layout": "NHWC", "dtype": "float16",
                                                                        "interpolation": "nearest",
                                                                        "crop_ratio": "0.875"})),
    PluginRequest: PluginRequest(op="mmdeploy::grid_sampler", targets=("ort-python", "ort-cpp"), impl="my impl.py",
                                 run=False, build=True, dims={"batch": 1, "seq len": 8}),
    RecipeRequest: RecipeRequest(fields={"resize": "letterbox", "size": "320x320", "scale": "1/255",
                                         "mean": "0,0,0", "std": "1,1,1", "color": "BGR", "layout": "NHWC",
                                         "dtype": "float16", "interpolation": "nearest", "pad_value": "114",
                                         "crop_ratio": "0.875"}),
}
# Fields FULL leaves at their default (dotted paths into nested options): the iterations are cleared by a duration
# and an .npz of inputs excludes the image folder (ProfileRequest), a preset is cleared by named passes
# (OptimizeRequest), the count of random samples by a file or dataset to compare on (CompareRequest). SOLO holds
# each of them away from its default.
CLEARED = {ProfileRequest: {"options.iterations", "options.inputs_npz"}, OptimizeRequest: {"preset"},
           CompareRequest: {"count"}}
# More requests each kind's command must read back as (fields that FULL clears).
SOLO = {CompareRequest: (CompareRequest(count=4, engine="mnn", dims={"batch": 1}),
                         CompareRequest(engine="ort", engine_b="openvino", ov_precision_b="bf16", count=7)),
        ProfileRequest: (ProfileRequest.of(engines=("ov",), iterations=7, inputs_npz="real inputs/x.npz",
                                           per_op=True, dims={"batch": 2}),),
        OptimizeRequest: (OptimizeRequest(preset="openvino", dims={"batch": 1}),)}
# Every kind the CLI builds from its flags: the remote-able ones and those that run here only.
TRIPS = (*REQUESTS, CompareRequest, InspectRequest, GraphRequest, DatasetAddRequest, DatasetEvalRequest,
         PluginRequest, RecipeRequest)
# The least request of each kind whose command the CLI reads (None: only FULL; a model or an op is required).
BARE = {EditRequest: None, DatasetEvalRequest: DatasetEvalRequest(model="m.onnx"),
        PluginRequest: PluginRequest(op="d::Op")}


def _leaves(request, prefix: str = "") -> dict[str, object]:
    """Every field of ``request`` by dotted path, a nested dataclass's fields (``options.seed``) in place of it:
    the list read from ``dataclasses.fields`` all the way down, so a new nested field is seen too."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(request):
        value = getattr(request, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(_leaves(value, f"{prefix}{f.name}."))
        else:
            out[prefix + f.name] = value
    return out


def _same_fields(a, b) -> list[str]:
    """The fields (dotted paths into nested options) whose values differ: empty when equal field by field."""
    la, lb = _leaves(a), _leaves(b)
    return sorted(k for k in la.keys() | lb.keys() if la.get(k, _MISSING) != lb.get(k, _MISSING))


_MISSING = object()


def test_the_trips_cover_every_request_kind():
    assert set(TRIPS) == set(REQUESTS) | set(HINT_REQUESTS) and set(FULL) == set(TRIPS)


def test_leaves_see_each_nested_option():
    """The oracle of the trips below: a ProfileRequest's leaves are its engines and each ProfileOptions field, and
    a difference inside the options is named by its path."""
    assert set(_leaves(ProfileRequest())) == {"engines"} | {f"options.{f.name}" for f in
                                                            dataclasses.fields(ProfileOptions)}
    assert _same_fields(ProfileRequest.of(seed=1), ProfileRequest.of(seed=2)) == ["options.seed"]


def _parsed(kind, command: str):
    """The request the CLI builds from ``command``'s words (each command's own ``request_of``)."""
    args = build_parser().parse_args(shlex.split(command)[1:])
    tasks = dict(api.parse_task_options(getattr(args, "tasks", None)))
    if kind is PrecisionRequest:
        class Named:                                 # the project dataset the CLI would open by that name
            name = args.dataset
        return precision_cmd.request_of(args, Named() if args.dataset else None, tasks, remote_args.goal_of(args))
    if kind is CheckRequest:
        return check_cmd.request_of(args, tasks=tasks)
    if kind is OptimizeRequest:
        return optimize_cmd.request_of(args)
    if kind is ExportRequest:
        return export_cmd.request_of(args, tasks, task_args.goal(args))
    if kind is BatchRequest:
        return batch_cmd.request_of(args)
    if kind is MemoryRequest:
        return memory_cmd.request_of(args)
    if kind is EditRequest:
        return edit_cmd.request_of(args)
    if kind is CompareRequest:
        return compare_cmd.request_of(args, tasks, task_args.goal(args))
    if kind is InspectRequest:
        return inspect_cmd.request_of(args)
    if kind is GraphRequest:
        return graph_cmd.request_of(args)
    if kind is DatasetAddRequest:
        return data_cmd.add_request_of(args)
    if kind is DatasetEvalRequest:
        return data_cmd.eval_request_of(args)
    if kind is PluginRequest:
        return plugin_cmd.request_of(args)
    if kind is RecipeRequest:
        return recipe_args.request_of(args)
    if kind is GenerationRequest:
        assert args.generate
        return profile_generate.request_of(args)
    return profile_cmd.request_of(args)


def _command(request) -> str:
    if isinstance(request, (ProfileRequest, GenerationRequest)):
        return request.command(["my model.onnx", "b.onnx"])
    if isinstance(request, BatchRequest):
        return request.command(["my model.onnx", "models dir"], "out dir")
    if isinstance(request, CompareRequest):
        return request.command("my model.onnx", "b v2.onnx")
    if isinstance(request, GraphRequest):               # --diff-mode is printed with a diff only
        return request.command("my model.onnx", "out dir/graph.html", diff="b v2.onnx")
    if isinstance(request, (DatasetAddRequest, DatasetEvalRequest, RecipeRequest)):
        return request.command("photo set", project="team's project")
    return request.command("my model.onnx", "out dir") if isinstance(request, ExportRequest) else \
        request.command("my model.onnx")


@pytest.mark.parametrize("kind", TRIPS, ids=lambda k: k.__name__)
def test_every_field_is_set_and_survives_json(kind):
    """Every leaf (a nested option's fields each) is away from its default in FULL, or in a SOLO request where
    FULL must clear it, and every request survives JSON field by field."""
    full, default = _leaves(FULL[kind]), _leaves(kind())
    same = sorted(n for n in set(default) - CLEARED.get(kind, set()) if full[n] == default[n])
    assert same == [], f"set these away from their defaults in FULL[{kind.__name__}]: {same}"
    assert CLEARED.get(kind, set()) <= set(default), "CLEARED names a field the request does not have"
    for request in (FULL[kind], kind(), *SOLO.get(kind, ())):
        assert _same_fields(kind.from_dict(json.loads(json.dumps(request.to_dict()))), request) == []
    for name in CLEARED.get(kind, ()):
        assert any(_leaves(r)[name] != default[name] for r in SOLO.get(kind, ())), \
            f"set {name} away from its default in SOLO[{kind.__name__}]"


@pytest.mark.parametrize("kind", TRIPS, ids=lambda k: k.__name__)
def test_the_cli_reads_each_command_back_as_the_same_request(kind, tmp_path):
    bare = BARE.get(kind, kind())
    for request in (FULL[kind], *(() if bare is None else (bare,)), *SOLO.get(kind, ())):
        if isinstance(request, EditRequest):      # the operations travel in the script file the command names
            script = tmp_path / "my edits.json"
            script.write_text(json.dumps(request.script))
            rebuilt = _parsed(kind, request.command("my model.onnx", script=str(script)))
            assert _same_fields(rebuilt, request) == [] and rebuilt == request
            continue
        if isinstance(request, BatchRequest) and request.stage_requests:   # they travel in the file it names
            stage_file = tmp_path / "stage requests.json"
            stage_file.write_text(request.stage_requests_json())
            rebuilt = _parsed(kind, request.command(["my model.onnx"], "out dir", requests_file=str(stage_file)))
            assert _same_fields(rebuilt, request) == [] and rebuilt == request
            continue
        rebuilt = _parsed(kind, _command(request))
        assert _same_fields(rebuilt, request) == [], _command(request)
        assert rebuilt == request


def test_the_compare_cli_hands_the_facade_the_request_its_flags_build(monkeypatch, capsys):
    """``onnx-studio compare`` builds one ``CompareRequest`` from its flags and hands it to ``api.compare`` whole
    (a spy); the call's own arguments are what this process opened (no feeds, no dataset here)."""
    calls = []

    class Stop(Exception):
        pass

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        raise Stop

    monkeypatch.setattr(api, "compare", spy)
    model = str(path_of("cnn_unfused"))
    sent = CompareRequest(engine="ort", engine_b="openvino", ov_precision_b="f16", count=3, dims={"batch": 2},
                          layerwise=True, layer_threshold=0.25, tasks={"logits": "classification"})
    with pytest.raises(Stop):
        main(shlex.split(sent.command(model, model))[1:])
    ((a, b, received), kwargs), = calls
    assert (a.path, b.path) == (path_of("cnn_unfused"), path_of("cnn_unfused"))
    assert _same_fields(received, sent) == [] and received == sent
    assert kwargs == {"feeds": None, "dataset": None}


def test_compare_with_a_request_runs_what_the_keywords_run():
    """Real ORT against OpenVINO on the cnn_unfused sample: ``api.compare(a, b, request)`` gives the comparison
    the same options as keywords give (the old door), value for value; a request naming a dataset the call
    did not open is one line."""
    model = path_of("cnn_unfused")
    request = CompareRequest(engine="ort", engine_b="openvino", count=3, dims={"batch": 2})
    by_request = api.compare(model, model, request).to_dict()
    by_keywords = api.compare(model, model, engine="ort", engine_b="openvino", count=3, dims={"batch": 2}).to_dict()
    assert by_request == by_keywords
    assert (by_request["feeds"]["count"], by_request["feeds"]["dims"]) == (3, {"batch": 2})     # the request's own
    with pytest.raises(StudioError, match="open it from its project"):
        api.compare(model, model, CompareRequest(dataset="photos"))


def test_the_inspect_cli_hands_the_facade_the_request_its_flags_build(monkeypatch, capsys):
    """``inspect`` and ``inspect --decoder`` build one ``InspectRequest`` each and hand it to the facade (spies);
    ``--memory 16GB`` reaches the budget as the same 16 000 000 000 bytes the size names."""
    calls = []

    class Stop(Exception):
        pass

    def spy(name):
        def record(*args, **kwargs):
            calls.append((name, args, kwargs))
            raise Stop
        return record

    monkeypatch.setattr(api, "inspect", spy("inspect"))
    monkeypatch.setattr(api, "inspect_decoder", spy("inspect_decoder"))
    model = str(path_of("cnn_unfused"))
    with pytest.raises(Stop):
        main(["inspect", model, "--dim", "batch=3"])
    with pytest.raises(Stop):
        main(["inspect", model, "--decoder", "--kv-length", "64", "--batch", "2", "--memory", "16GB",
              "--kv-dtype", "fp8"])
    (name, (handle, plain), _), (dname, (path, decoder), _) = calls
    assert (name, handle.path, plain) == ("inspect", path_of("cnn_unfused"), InspectRequest(dims={"batch": 3}))
    assert (dname, path) == ("inspect_decoder", model)
    assert decoder == InspectRequest(decoder=True, kv_length=64, batch=2, memory_gib=16e9 / 2**30, kv_dtype="fp8")
    assert (decoder.memory_bytes, decoder.kv_dtype_name) == (16_000_000_000, "float8_e4m3fn")


def test_inspect_with_a_request_summarizes_what_the_dims_summarize():
    """The request's dims are the summary's (real shape inference on the cnn_unfused sample: FLOPs at batch 3
    are three times batch 1's); a decoder's request is refused by the summary in one line."""
    handle = api.load(path_of("cnn_unfused"))
    by_request = api.inspect(handle, InspectRequest(dims={"batch": 3}), memory=False)
    by_dims = api.inspect(handle, {"batch": 3}, memory=False)
    assert by_request.to_dict() == by_dims.to_dict()
    assert by_request.flops.flops == 3 * api.inspect(handle, {"batch": 1}, memory=False).flops.flops
    with pytest.raises(StudioError, match="inspect_decoder"):
        api.inspect(handle, InspectRequest(decoder=True))


class _Spy:
    """Stands in for the facade call at the far end: records the request it was handed (and its files)."""

    def __init__(self, result=None):
        self.calls: list[tuple] = []
        self.result = result

    def __call__(self, *args, **kwargs):
        request = next((a for a in (*args, *kwargs.values()) if type(a) in REQUESTS), None)
        if request is None:                          # api.profile_generation(targets, engines, GenerationOptions)
            options = args[2]
            request = GenerationRequest(engines=args[1], **{k: getattr(options, k) for k in GenerationRequest().options})
        self.calls.append((request, kwargs.get("files")))
        self.kwargs = kwargs
        return self.result


REMOTE = {ProfileRequest: ("profile", "profile"), CheckRequest: ("check", "check"),
          PrecisionRequest: ("precision", "precision"), GenerationRequest: ("generate", "profile_generation")}


@pytest.mark.parametrize("kind", list(REMOTE), ids=lambda k: k.__name__)
def test_target_local_hands_the_far_end_the_request_that_was_sent(kind, monkeypatch):
    """``--target local`` goes through the same trip as a worker (JSON and back, ``run_request``): the
    request the facade receives there equals the one sent, field by field; ``Measured.request`` says so."""
    spy = _Spy()
    monkeypatch.setattr(api, REMOTE[kind][1], spy, raising=False)
    handle = api.load(path_of("cnn_unfused"))
    sent = FULL[kind]
    measured = (batch_api.profile_on(["local"], [handle], sent)[0] if kind is ProfileRequest
                else batch_api.generate_on(["local"], [handle], sent)[0] if kind is GenerationRequest
                else batch_api.check_on("local", handle, sent) if kind is CheckRequest
                else batch_api.precision_on("local", handle, sent))
    (received, _files), = spy.calls
    assert received is not sent and _same_fields(received, sent) == []
    assert measured.target == "local" and measured.request == sent


def test_precision_on_local_keeps_the_runs_own_arguments_beside_the_trip(monkeypatch, tmp_path):
    """Precision's ``--target local`` (and a plain local run, the CLI's default target) rebuilds the request
    from JSON like a worker, while what belongs to this run (the opened dataset, the output folder, the
    callbacks) still reaches ``api.precision`` as it was given."""
    spy = _Spy()
    monkeypatch.setattr(api, "precision", spy)
    dataset, progress, tick = object(), (lambda *a: None), (lambda *a: None)
    measured = batch_api.precision_on("local", api.load(path_of("cnn_unfused")), FULL[PrecisionRequest],
                                      dataset=dataset, out_dir=tmp_path / "variants", pool_key="trip",
                                      on_progress=progress, on_tick=tick)
    (received, _files), = spy.calls
    assert received is not FULL[PrecisionRequest] and received == measured.request == FULL[PrecisionRequest]
    assert spy.kwargs["dataset"] is dataset and spy.kwargs["out_dir"] == tmp_path / "variants"
    assert spy.kwargs["on_progress"] is progress and spy.kwargs["on_tick"] is tick
    assert spy.kwargs["pool_key"] == "trip"


@pytest.mark.parametrize("kind", list(REMOTE), ids=lambda k: k.__name__)
def test_the_worker_side_rebuilds_every_field_and_locates_the_files_that_came(kind, monkeypatch, tmp_path):
    """What a remote target runs (``remote_measure``, the Dask worker's function): the request from JSON with
    its data files in the hashed package; the far end's facade call gets the request sent, field by field,
    and the files where they arrived."""
    spy = _Spy()
    monkeypatch.setattr(api, REMOTE[kind][1], spy, raising=False)
    monkeypatch.setenv("ONNX_STUDIO_WORKER_CACHE", str(tmp_path / "cache"))
    model = path_of("cnn_unfused")
    data_file = tmp_path / "x.npz"
    data_file.write_bytes(b"not read: the spy stands in for the run")
    keys = {ProfileRequest: ("images",), CheckRequest: ("inputs",),
            PrecisionRequest: ("calibration", "inputs"), GenerationRequest: ()}[kind]
    named = {k: f"data/{k}.npz" for k in keys}
    blob = _pack({"m0/model.onnx": model, **{arc: data_file for arc in named.values()}})
    sent = FULL[kind]
    answer = remote_measure(REMOTE[kind][0], blob, hashlib.sha256(blob).hexdigest(),
                            [("model", "m0/model.onnx", api.load(model).sha256)], named,
                            {"request": json.loads(json.dumps(sent.to_dict()))})
    assert "error" not in answer, answer
    (received, files), = spy.calls
    assert _same_fields(received, sent) == [] and kind.from_dict(answer["request"]) == sent
    if kind is not GenerationRequest:                # a generation profile draws seeded prompts: no files
        assert sorted(files) == sorted(keys) and all(str(p).endswith(named[k]) for k, p in files.items())


def test_the_cli_doors_send_every_profile_check_and_precision_option_to_the_far_end(monkeypatch, tmp_path, capsys):
    """``onnx-studio profile|check|precision ... --target local``: the flags become the request, and that
    request arrives at the far end whole (the CLI's own checks need the named files to exist)."""
    import numpy as np
    import onnx

    from studio.core.feeds import save_npz

    monkeypatch.chdir(tmp_path)
    (tmp_path / "real inputs").mkdir()
    save_npz(api.make_inputs(api.load(path_of("cnn_unfused"))).sets, tmp_path / "real inputs" / "x.npz")
    assert np.load(tmp_path / "real inputs" / "x.npz").files
    (tmp_path / "calib dir").mkdir()
    for name in ("calib dir/calib.npz", "eval.npz"):
        (tmp_path / name).write_bytes((tmp_path / "real inputs" / "x.npz").read_bytes())
    out_name = onnx.load(str(path_of("cnn_unfused"))).graph.output[0].name
    precision = dataclasses.replace(FULL[PrecisionRequest], goal=None, dataset=None,   # judged on a project dataset
                                    tasks={out_name: "classification"})
    no_images = dataclasses.replace(FULL[ProfileRequest].options, images_dir=None, inputs_npz="real inputs/x.npz")
    for kind, sent in ((ProfileRequest, dataclasses.replace(FULL[ProfileRequest], options=no_images)),
                       (CheckRequest, dataclasses.replace(FULL[CheckRequest], engines=("onnxruntime",), eps=("cpu",))),
                       (PrecisionRequest, precision), (GenerationRequest, FULL[GenerationRequest])):
        spy = _Spy(result=_Stub())
        monkeypatch.setattr(api, REMOTE[kind][1], spy, raising=False)
        words = shlex.split(sent.command([str(path_of("cnn_unfused"))]) if kind in (ProfileRequest, GenerationRequest)
                            else sent.command(str(path_of("cnn_unfused"))))[1:]
        main([*words, "--target", "local", "--json"])
        (received, _files), = spy.calls
        assert _same_fields(received, sent) == [], kind.__name__
    capsys.readouterr()


class _Stub:
    """A result the CLI can print after the spy ran instead of the engines."""

    ok = True
    variants = ()
    verdicts = ()

    def to_dict(self, **_):
        return {}

    def has_errors_for(self, _engines):
        return False


def _shape(value):
    """The structure of a JSON value: keys and types, not the measured numbers."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value[:1]]
    return type(value).__name__ if value is not None else None


def test_a_local_run_and_a_target_local_run_give_the_same_result():
    """Real ORT on the cnn_unfused sample: the same check verdicts and findings, the same profile variants
    and options, and the same JSON structure, whether run here or through ``--target local``."""
    handle = api.load(path_of("cnn_unfused"))
    check = CheckRequest(engines=("onnxruntime",), dims={"batch": 2})
    here, there = api.check(handle, check), batch_api.check_on("local", handle, check)
    assert there.request == check
    assert [(v.engine, v.verdict, v.decided_by, v.ran_on) for v in here.verdicts] == \
        [(v.engine, v.verdict, v.decided_by, v.ran_on) for v in there.result.verdicts]
    assert [f.code for f in here.findings] == [f.code for f in there.result.findings]
    assert _shape(here.to_dict()) == _shape(there.result.to_dict())

    profile = ProfileRequest.of(iterations=5, rounds=2, warmup=1, dims={"batch": 2})
    here_p = api.profile([handle], profile)
    (there_p,) = batch_api.profile_on(["local"], [handle], profile)
    assert there_p.request == profile and here_p.ok and there_p.result.ok
    assert [v.id for v in here_p.variants] == [v.id for v in there_p.result.variants]
    assert here_p.options == there_p.result.options == api.profile_options(profile)
    assert here_p.feeds == there_p.result.feeds
    assert _shape(here_p.to_dict()) == _shape(there_p.result.to_dict())


def test_a_batch_page_and_the_cli_run_the_same_tasks():
    """The Batch page's default (check on ONNX Runtime) printed no --engines, so its hint ran check on ORT and
    OpenVINO and profile on both; now the page's request prints its engines and the CLI builds the same
    request, hence the same stage options (the task keys a resume skips on)."""
    page = BatchRequest(stages=["inspect", "check", "profile"], engines=["onnxruntime"])
    cli = batch_cmd.request_of(build_parser().parse_args(shlex.split(page.command(["m.onnx"]))[1:]))
    assert cli == page and cli.stage_options() == page.stage_options() == {
        "check": {"engines": ["onnxruntime"]}, "profile": {"engines": ["onnxruntime"]}}
    assert BatchRequest().stage_options() == {}          # each stage's own defaults, as before


def test_the_memory_hint_run_by_the_cli_plans_what_the_overview_planned(capsys):
    """The Overview's memory section with measuring off asked for no plan of ORT's optimized graph while its
    hint (``--no-measure``) made the CLI plan one; both now run one ``MemoryRequest`` (cnn_unfused, ORT)."""
    model = str(path_of("cnn_unfused"))
    page = MemoryRequest(dims={"batch": 2}, measure=False)
    here = api.memory_plan(api.load(model), page)
    assert main([*shlex.split(page.command(model))[1:], "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["peak_bytes"] == here.plan.peak_bytes and cli["dims"] == {"batch": 2}
    assert [e["engine"] for e in cli["engine_plans"]] == [e.engine for e in here.engine_plans] != []


def test_an_edit_kept_from_the_cli_stores_its_request(tmp_path, capsys):
    """``edit --project`` keeps the version with the request in its provenance, as the Graph page does
    (cnn_unfused: a rename of its output). The projects root is the suite's temporary one (conftest)."""
    import onnx

    model = str(path_of("cnn_unfused"))
    out_name = onnx.load(model).graph.output[0].name
    request = EditRequest(operations=[{"op": "rename", "tensors": {out_name: "scores"}}])
    script = tmp_path / "edits.json"
    script.write_text(json.dumps(request.script))
    argv = shlex.split(request.command(model, script=str(script), output=str(tmp_path / "e.onnx"),
                                       project="request-trips"))[1:]
    assert main([*argv, "--json"]) == 0
    version = json.loads(capsys.readouterr().out)["version"]["id"]
    assert main(["projects", "show", "request-trips", "--json"]) == 0
    (m,) = json.loads(capsys.readouterr().out)["models"]
    (kept,) = [v for v in m["versions"] if v["id"] == version]
    assert EditRequest.from_dict(kept["provenance"]["request"]) == request
    assert kept["provenance"]["edit"]["script"] == request.script


def test_a_profile_kept_from_the_cli_stores_its_request_in_the_job_row(capsys):
    """``profile --project`` stores the request its flags built in the job row, as the Profile page's job row
    does (cnn_unfused on ORT, a short run); the stored dict rebuilds the same request."""
    model = str(path_of("cnn_unfused"))
    request = ProfileRequest.of(iterations=3, rounds=2, warmup=1, dims={"batch": 2}, seed=3)
    argv = shlex.split(request.command([model]))[1:]
    assert main([*argv, "--project", "profile-request", "--json"]) == 0
    capsys.readouterr()
    (job,) = [j for j in api.open_project("profile-request").jobs() if j.kind == "profile"]
    assert ProfileRequest.from_dict(job.args["request"]) == request


def test_a_generation_profile_kept_from_the_cli_stores_its_request(monkeypatch, capsys):
    """``profile --generate --project``: the job row keeps the ``GenerationRequest`` the flags built (the
    generation itself stands in: what is stored is the question)."""
    monkeypatch.setattr(api, "profile_generation", _Spy(result=_Stub()))
    request = dataclasses.replace(FULL[GenerationRequest], engines=("ort",))
    argv = shlex.split(request.command([str(path_of("cnn_unfused"))]))[1:]
    main([*argv, "--project", "generation-request", "--json"])
    capsys.readouterr()
    (job,) = [j for j in api.open_project("generation-request").jobs() if j.kind == "profile"]
    assert GenerationRequest.from_dict(job.args["request"]) == request


def test_memory_reorder_takes_the_request_the_cli_built(monkeypatch, tmp_path, capsys):
    """``api.memory_reorder(handle, request, out)``: the ``MemoryRequest`` the CLI builds from
    ``memory --reorder`` flags is what the facade receives (dims, measure, the measuring time limit)."""
    from studio.facade import optimize as optimize_room

    seen = []

    def spy(handle, out_path, dims, **kwargs):
        seen.append((dict(dims), kwargs["measure"], kwargs["timeout_s"]))
        raise StudioError("stopped by the test after the call was seen")

    monkeypatch.setattr(optimize_room, "_reorder", spy)
    sent = FULL[MemoryRequest]
    model = str(path_of("cnn_unfused"))
    with pytest.raises(StudioError, match="stopped by the test"):
        api.memory_reorder(api.load(model), sent, tmp_path / "r.onnx")
    assert main([*shlex.split(sent.command(model, output=str(tmp_path / "r.onnx")))[1:], "--json"]) != 0
    capsys.readouterr()
    assert seen == [({"batch": 2, "seq len": 5}, False, 30.0)] * 2


def test_edit_takes_the_request_and_reads_relative_files_from_the_base_folder(monkeypatch, tmp_path):
    """``api.edit(handle, EditRequest, out, base_dir=)``: an operation's relative .npy is read from the folder
    the call names (the CLI: the script's), not from the working folder (cnn_unfused, a weight replaced; the
    oracle is the array written)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = str(path_of("cnn_unfused"))
    init = next(i for i in onnx.load(model).graph.initializer if numpy_helper.to_array(i).ndim == 4)
    new = np.random.default_rng(3).normal(size=numpy_helper.to_array(init).shape).astype(np.float32)
    (tmp_path / "scripts").mkdir()
    np.save(tmp_path / "scripts" / "w.npy", new)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    request = EditRequest(operations=[{"op": "replace_initializer", "name": init.name, "npy": "w.npy"}], verify=False)
    out = tmp_path / "o" / "e.onnx"
    api.edit(api.load(model), request, out, base_dir=tmp_path / "scripts")
    (written,) = [i for i in onnx.load(str(out)).graph.initializer if i.name == init.name]
    np.testing.assert_array_equal(numpy_helper.to_array(written), new)
    with pytest.raises(StudioError):                    # the working folder has no w.npy
        api.edit(api.load(model), request, tmp_path / "o" / "f.onnx")


# --- optimize on a target: the request goes, the model comes back (issue 34 item 2) -----------------------------

def _no_model_result(request=None):
    """A pipeline result that wrote nothing: what the spy hands back in place of a run."""
    from passes.pipeline import PipelineResult

    return PipelineResult(output=None, records=(), ok=True, stopped_at=None, request=request)


def _without_timings(value):
    """A report without its clocks (seconds differ between any two runs; nothing else may)."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in ("seconds", "verify_seconds")}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_optimize_target_local_hands_the_far_end_every_field(monkeypatch, tmp_path):
    """``optimize_on("local")`` makes the worker's trip (JSON and back, ``run_request``): ``api.optimize`` there
    receives the request sent, field by field (``FULL`` sets every field of ``dataclasses.fields``), and the
    call's own arguments (where the model and the partial go) as they were given."""
    spy = _Spy(result=_no_model_result())
    monkeypatch.setattr(api, "optimize", spy)
    sent = FULL[OptimizeRequest]
    measured = batch_api.optimize_on("local", api.load(path_of("cnn_unfused")), sent, out_path=tmp_path / "o.onnx",
                                     partial=tmp_path / "o.partial.onnx", pool_key="trip")
    (received, _files), = spy.calls
    assert received is not sent and _same_fields(received, sent) == []
    assert measured.request == sent and measured.result.request == sent
    assert spy.kwargs["out_path"] == tmp_path / "o.onnx" and spy.kwargs["partial"] == tmp_path / "o.partial.onnx"
    assert spy.kwargs["pool_key"] == "trip" and spy.kwargs["dump_dir"] is None


def test_the_optimize_worker_rebuilds_every_field_and_reads_the_inputs_that_came(monkeypatch, tmp_path):
    """The worker side (``remote_measure``): the request from JSON, its verification inputs where they arrived
    in the hashed package (the one field the worker points at its own copy), the result named as the client
    asked, inside the worker's scratch; the answer carries the request as sent."""
    spy = _Spy(result=_no_model_result())
    monkeypatch.setattr(api, "optimize", spy)
    monkeypatch.setenv("ONNX_STUDIO_WORKER_CACHE", str(tmp_path / "cache"))
    model = path_of("cnn_unfused")
    data_file = tmp_path / "x.npz"
    data_file.write_bytes(b"not read: the spy stands in for the run")
    blob = _pack({"m0/model.onnx": model, "data/inputs.npz": data_file})
    sent = FULL[OptimizeRequest]
    answer = remote_measure("optimize", blob, hashlib.sha256(blob).hexdigest(),
                            [("model", "m0/model.onnx", api.load(model).sha256)], {"inputs": "data/inputs.npz"},
                            {"request": json.loads(json.dumps(sent.to_dict())), "output": "my model-opt.onnx",
                             "partial": "my model-opt.partial.onnx"})
    assert "error" not in answer, answer
    (received, _files), = spy.calls
    assert _same_fields(received, sent) == ["inputs"] and received.inputs.endswith("data/inputs.npz")
    assert OptimizeRequest.from_dict(answer["request"]) == sent and answer["result"].request == sent
    assert spy.kwargs["out_path"].name == "my model-opt.onnx" and str(tmp_path / "cache") in str(spy.kwargs["out_path"])
    assert spy.kwargs["partial"].name == "my model-opt.partial.onnx"
    # a name with a folder in it is refused on the worker: it writes only in its own scratch
    bad = remote_measure("optimize", blob, hashlib.sha256(blob).hexdigest(),
                         [("model", "m0/model.onnx", api.load(model).sha256)], {},
                         {"request": sent.to_dict(), "output": "../escape.onnx"})
    assert bad["code"] == "BAD-REQUEST" and len(spy.calls) == 1


def test_the_optimize_cli_door_sends_every_option_to_the_far_end(monkeypatch, tmp_path, capsys):
    """``onnx-studio optimize MODEL -o OUT <the request's own flags> --target local``: the flags become the
    request and that request arrives at the far end whole."""
    from studio.core.feeds import save_npz

    monkeypatch.chdir(tmp_path)
    (tmp_path / "real inputs").mkdir()
    save_npz(api.make_inputs(api.load(path_of("cnn_unfused"))).sets, tmp_path / "real inputs" / "x.npz")
    spy = _Spy(result=_no_model_result())
    monkeypatch.setattr(api, "optimize", spy)
    sent = FULL[OptimizeRequest]
    words = shlex.split(sent.command(str(path_of("cnn_unfused")), str(tmp_path / "o.onnx")))[1:]
    main([*words, "--target", "local", "--json"])
    (received, _files), = spy.calls
    assert _same_fields(received, sent) == []
    assert json.loads(capsys.readouterr().out)["target"] == "local"


def test_a_local_optimize_and_a_target_local_optimize_write_the_same_model(tmp_path, capsys):
    """Real passes and ORT verification on the cnn_unfused sample: ``optimize`` here and ``optimize --target
    local`` write byte-identical models and the same report (clocks aside)."""
    model = str(path_of("cnn_unfused"))
    reports = []
    for name, extra in (("here.onnx", []), ("there.onnx", ["--target", "local"])):
        assert main(["optimize", model, "-o", str(tmp_path / name), "--dim", "batch=2", "--json", *extra]) == 0
        reports.append(json.loads(capsys.readouterr().out))
    here, there = reports
    assert there["target"] == "local" and there["measured_by"]["pid"] == __import__("os").getpid()
    assert (tmp_path / "here.onnx").read_bytes() == (tmp_path / "there.onnx").read_bytes()
    there = there["result"]
    assert (here["output"], there["output"]) == (str(tmp_path / "here.onnx"), str(tmp_path / "there.onnx"))
    here.pop("output"), there.pop("output")
    assert here["ok"] and any(r["status"] == "changed" for r in here["records"])
    assert _without_timings(here) == _without_timings(there)


def test_an_optimized_model_over_the_return_limit_comes_back_through_the_shared_folder(monkeypatch, tmp_path):
    """Over the limit a target sends back in its answer (set to 1 KiB here), the worker writes the model and its
    external data (weights saved externally here: the threshold set to 0) under its declared shared folder; the
    client copies them next to -o, hash-checked, and removes the job folder. With no shared folder: a one-line
    refusal naming the limit. Real passes on the external_data sample (its weights in a side file)."""
    import onnx

    from studio.batch.remote import land_model
    from studio.core import model_io

    monkeypatch.setattr(model_io, "EXTERNAL_THRESHOLD", 0)
    monkeypatch.setenv("ONNX_STUDIO_WORKER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ONNX_STUDIO_REMOTE_RETURN_MAX_BYTES", "1024")
    source = path_of("external_data")
    blob = _pack({"m0/model.onnx": source, "m0/external_data.onnx.data": source.with_name("external_data.onnx.data")})
    request = OptimizeRequest(passes=("fuse-matmul-add",))              # changes the model: saved anew
    call = ("optimize", blob, hashlib.sha256(blob).hexdigest(), [("model", "m0/model.onnx", api.load(source).sha256)],
            {}, {"request": request.to_dict(), "output": "small.onnx"})
    refused = remote_measure(*call)
    assert refused["code"] == "TOO-LARGE" and "ONNX_STUDIO_REMOTE_RETURN_MAX_BYTES" in refused["error"]
    assert "1.0 KiB" in refused["error"] or "1 KiB" in refused["error"] or "1,024" in refused["error"], refused["error"]

    (tmp_path / "shared").mkdir()
    monkeypatch.setenv("ONNX_STUDIO_SHARED_DIR", str(tmp_path / "shared"))
    answer = remote_measure(*call)
    assert "error" not in answer, answer
    returned = answer["returned"]
    assert [n for n, _size, _sha in returned["files"]] == ["small.onnx.data", "small.onnx"]    # the model last
    assert returned["shared"].startswith(str(tmp_path / "shared"))
    (tmp_path / "out").mkdir()
    result = land_model(answer["result"], returned, tmp_path / "out", "edge")
    assert result.output == tmp_path / "out" / "small.onnx"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["small.onnx", "small.onnx.data"]
    assert list((tmp_path / "shared").iterdir()) == []                 # the job folder emptied
    assert api.load(result.output).external_files                     # the weights stayed in the side file
    import numpy as np
    import onnxruntime as ort

    feeds = api.make_inputs(api.load(source)).sets[0]                 # the landed model computes what the source does
    got, want = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds)
                 for p in (result.output, source))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert onnx.load(str(result.output)).graph.node != onnx.load(str(source)).graph.node     # and it was optimized


def test_a_damaged_returned_model_is_not_written(tmp_path):
    """The client hashes each returned file as it writes it; one damaged file (bytes changed on the way) and
    nothing of the answer is kept, not even the good file written before it."""
    from studio.batch.remote import land_model

    result = _no_model_result()
    result = dataclasses.replace(result, output=tmp_path / "worker" / "m.onnx")
    returned = {"files": [("m.onnx.data", b"abc", hashlib.sha256(b"abc").hexdigest()),
                          ("m.onnx", b"xyz", hashlib.sha256(b"other").hexdigest())]}
    with pytest.raises(StudioError, match="damaged on the way"):
        land_model(result, returned, tmp_path, "edge")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with pytest.raises(StudioError, match="leaves its folder"):
        land_model(result, {"files": [("../m.onnx", b"x", hashlib.sha256(b"x").hexdigest())]}, tmp_path, "edge")


@pytest.mark.slow
def test_optimize_on_a_dask_target_returns_the_model_and_keeps_the_request(dask_cluster, tmp_path, capsys,
                                                                            monkeypatch):
    """A real loopback Dask cluster (stock scheduler, studio workers, target 'edge'): ``optimize --target edge``
    runs the pipeline in the edge worker's process (its pid), verifying there, and the optimized model comes
    back to -o, byte-identical to a run here, with the same report; ``--project`` keeps it with its request.
    Over a target's answer limit the model is pulled from its worker in chunks."""
    import os

    from studio.batch import remote

    model = str(path_of("cnn_unfused"))
    request = OptimizeRequest(dims={"batch": 2})
    argv = shlex.split(request.command(model, str(tmp_path / "here.onnx")))[1:]
    assert main([*argv, "--json"]) == 0
    here = json.loads(capsys.readouterr().out)
    argv = shlex.split(request.command(model, str(tmp_path / "out" / "edge.onnx")))[1:]
    assert main([*argv, "--target", "edge", "--cluster", dask_cluster.address, "--project", "optimize-remote",
                 "--json"]) == 0
    there = json.loads(capsys.readouterr().out)
    assert there["target"] == "edge" and there["measured_by"]["target"] == "edge"
    assert there["measured_by"]["pid"] != os.getpid() and there["measured_by"]["worker"]
    assert (tmp_path / "out" / "edge.onnx").read_bytes() == (tmp_path / "here.onnx").read_bytes()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["edge.onnx"]     # nothing else written
    there = there["result"]
    assert there["output"] == str(tmp_path / "out" / "edge.onnx")
    here.pop("output"), there.pop("output")
    assert here["ok"] and _without_timings(here) == _without_timings(there)
    assert main(["projects", "show", "optimize-remote", "--json"]) == 0
    (m,) = json.loads(capsys.readouterr().out)["models"]
    (kept,) = [v for v in m["versions"] if (v.get("provenance") or {}).get("request")]
    assert OptimizeRequest.from_dict(kept["provenance"]["request"]) == request

    # a target whose answers may carry 4 KiB (the model is larger, no shared folder): the worker holds the
    # model and the client pulls it from that worker in 20 000-byte chunks, then the worker drops it
    dask_cluster.env = {**dask_cluster.env, "ONNX_STUDIO_REMOTE_RETURN_MAX_BYTES": "4096"}
    dask_cluster.start_worker("far", "far")
    dask_cluster.wait_workers(3)
    pulls, real_land = [], remote.land_model

    def counted(result, returned, folder, target, pull=None):      # the pulls the client makes
        def one(name, offset, length):
            pulls.append((name, offset, length))
            return pull(name, offset, length)
        return real_land(result, returned, folder, target, pull=one if pull else None)

    monkeypatch.setattr(remote, "land_model", counted)
    monkeypatch.setenv("ONNX_STUDIO_REMOTE_CHUNK_BYTES", "20000")
    argv = shlex.split(request.command(model, str(tmp_path / "far" / "far.onnx")))[1:]
    assert main([*argv, "--target", "far", "--cluster", dask_cluster.address, "--json"]) == 0
    far = json.loads(capsys.readouterr().out)
    assert far["measured_by"]["target"] == "far"
    size = (tmp_path / "here.onnx").stat().st_size
    assert size > 4096 and (tmp_path / "far" / "far.onnx").read_bytes() == (tmp_path / "here.onnx").read_bytes()
    assert pulls == [("far.onnx", offset, 20000) for offset in range(0, size, 20000)]
    assert not any((dask_cluster.root / "cache-far" / "held").iterdir())      # dropped after the pull
    assert _without_timings(far["result"] | {"output": None}) == _without_timings(here | {"output": None})


def test_optimize_on_a_remote_target_refuses_in_one_line_before_any_work(monkeypatch, tmp_path, capsys):
    """What a remote optimize cannot do is one line, before anything is sent or written: the per-pass dumps
    (they stay on the machine that runs the passes), a target with no cluster named, two targets at once."""
    from tests.conftest import assert_user_message

    monkeypatch.delenv("ONNX_STUDIO_CLUSTER", raising=False)
    model = str(path_of("cnn_unfused"))
    out = str(tmp_path / "out" / "o.onnx")
    for extra, words in ((["--target", "edge", "--dump-dir", str(tmp_path / "dumps")], ("--dump-dir", "--target")),
                         (["--target", "edge"], ("--target needs a cluster",)),
                         (["--target", "edge", "--target", "local"], ("one --target at a time",))):
        assert main(["optimize", model, "-o", out, *extra]) == 2
        assert_user_message(capsys.readouterr().err.strip().splitlines()[-1], *words)
    assert not (tmp_path / "dumps").exists() and not (tmp_path / "out" / "o.onnx").exists()


# --- graph: one GraphRequest from the CLI and the Graph page to the facade (issue 34 item 2) ---------------------

def test_the_graph_facade_draws_what_the_request_asks():
    """``api.graph_view``/``graph_viewer_html``/``graph_index_inspected`` take the ``GraphRequest``: its dims size
    the shapes (real shape inference on cnn_unfused: batch 3 is the summary ``inspect`` gives at batch 3), its
    overlay, search and level draw the overview, its focus and hops the region, each as the keywords (the old
    door) draw them; the viewer colours by the request's overlay. A request and keywords at once are one line."""
    handle = api.load(path_of("cnn_unfused"))
    index, summary = api.graph_index_inspected(handle, GraphRequest(dims={"batch": 3}))
    assert summary.to_dict() == api.inspect(handle, {"batch": 3}, memory=False).to_dict()
    assert summary.to_dict() != api.inspect(handle, {"batch": 1}, memory=False).to_dict()

    asked = GraphRequest(level=1, overlay="FLOPs share", search="Conv")
    view = api.graph_view(index=index, summary=summary, request=asked)
    old = api.graph_view(index=index, summary=summary, level=1, overlay="FLOPs share", query="Conv")
    plain = api.graph_view(index=index, summary=summary)
    assert view.painted.name == "FLOPs share" and plain.painted.name == "op type"
    assert view.highlight and view.highlight == old.highlight and not plain.highlight
    assert view.projection.level == 1 and [it.ref for it in view.items] == [it.ref for it in old.items]

    node = handle.proto.graph.node[3].name
    region = api.graph_view(index=index, summary=summary, request=GraphRequest(focus=node, hops=1))
    old_region = api.graph_view(index=index, summary=summary, focus=node, hops=1)
    assert region.mode == "region" and region.title == old_region.title and "1 hops" in region.title
    assert [it.ref for it in region.items] == [it.ref for it in old_region.items]
    assert len(region) < len(api.graph_view(index=index, summary=summary, focus=node))     # hops 2 by default

    html = api.graph_viewer_html(index, GraphRequest(overlay="FLOPs share"), summary=summary)
    assert html == api.graph_viewer_html(index, summary=summary, overlay="FLOPs share")
    assert html != api.graph_viewer_html(index, GraphRequest(), summary=summary)
    with pytest.raises(StudioError, match="not both") as both:
        api.graph_view(index=index, request=asked, level=2)
    assert both.value.code == "BAD-REQUEST"
    with pytest.raises(StudioError, match="whole graph"):
        api.graph_viewer_html(index, GraphRequest(focus=node))


def test_the_graph_cli_hands_the_facade_the_request_its_flags_build(monkeypatch, tmp_path, capsys):
    """``onnx-studio graph``: the flags' ``GraphRequest`` reaches the facade whole (spies on the calls that draw:
    the viewer, the overview, the region, the diff); overlay data that picks the colouring is the request's
    overlay."""
    calls = []

    def spy(name):
        real = getattr(api, name)

        def record(*args, **kwargs):
            calls.append((name, args, kwargs))
            return real(*args, **kwargs)
        return record

    for name in ("write_graph_viewer", "graph_view", "write_diff", "write_diff_viewer", "graph_index_inspected"):
        monkeypatch.setattr(api, name, spy(name))
    model = str(path_of("cnn_unfused"))
    node = api.load(model).proto.graph.node[3].name
    for sent, out, diff, drawn in (
            (GraphRequest(dims={"batch": 3}, overlay="FLOPs share", renderer="boxes"), "v.html", None,
             "write_graph_viewer"),
            (GraphRequest(level=1, overlay="FLOPs share", search="Conv"), "o.html", None, "graph_view"),
            (GraphRequest(focus=node, hops=1, overlay="FLOPs share"), "r.dot", None, "graph_view"),
            (GraphRequest(diff_mode="side-by-side"), "d.html", model, "write_diff_viewer"),
            (GraphRequest(level=1, renderer="echarts", diff_mode="side-by-side"), "e.html", model, "write_diff")):
        calls.clear()
        assert main(shlex.split(sent.command(model, str(tmp_path / out), diff=diff))[1:]) == 0
        received = [c for c in calls if c[0] == drawn]
        assert len(received) == 1, calls
        _name, args, kwargs = received[0]
        request = kwargs.get("request") or next(a for a in args if isinstance(a, GraphRequest))
        assert request == sent
        if not diff and not sent.focus:              # the index is built at the request's dims
            (_n, (_handle, inspected), _kw), = [c for c in calls if c[0] == "graph_index_inspected"]
            assert inspected == sent
    capsys.readouterr()


# --- data add / data eval / data recipe / plugin: the CLI hands the facade its request (issue 34 item 2) ----------

class _Stop(Exception):
    pass


def _stopping(calls: list, real=None):
    """A facade call that records its arguments, then stops the command (or runs ``real``)."""
    def record(*args, **kwargs):
        calls.append((args, kwargs))
        if real is None:
            raise _Stop
        return real(*args, **kwargs)
    return record


def test_the_data_and_plugin_clis_hand_the_facade_the_request_their_flags_build(monkeypatch, tmp_path, capsys):
    """``data add``, ``data eval``, ``data recipe`` and ``plugin`` build one request each from their flags (every
    field set) and the facade receives it whole (spies); what is the call's (the opened model, the project's
    task choices, the output folder) beside it. The recipe runs for real: the dataset's stored recipe is the
    request's (sample photos, image_classifier)."""
    model = str(path_of("image_classifier"))
    photos = str(api.sample_photos_folder())
    calls: list = []

    monkeypatch.setattr(api, "add_dataset", _stopping(calls))
    recipe_file = tmp_path / "my recipe.json"           # --recipe FILE, the request's fields on top of it
    recipe_file.write_text(json.dumps(api.preprocessing_recipe(file="caffe").to_dict()))
    sent = dataclasses.replace(FULL[DatasetAddRequest], model=model, recipe_file=str(recipe_file))
    with pytest.raises(_Stop):
        main(shlex.split(sent.command(photos, project="request trips data"))[1:])
    ((_project, source, received), kwargs), = calls
    assert (source, received) == (photos, sent) and kwargs["model"].path == path_of("image_classifier")
    # the facade resolves the request's recipe itself (tests/data/test_dataset_requests.py): the CLI passes none
    assert kwargs.get("recipe") is None and "set on the command line: --recipe" in kwargs["recipe_reason"]
    monkeypatch.undo()

    project = api.open_project("request trips data", create=True)
    api.add_dataset(project, photos, DatasetAddRequest(name="photos", model=model), model=api.load(model))
    calls.clear()
    monkeypatch.setattr(api, "evaluate_on_dataset", _stopping(calls))
    out_name = api.load(model).proto.graph.output[0].name
    sent = dataclasses.replace(FULL[DatasetEvalRequest], model=model, candidate=model, engine="ort",
                               tasks={out_name: "classification"})
    with pytest.raises(_Stop):
        main(shlex.split(sent.command("photos", project="request trips data"))[1:])
    ((ds, received), kwargs), = calls
    assert ds.name == "photos" and received == sent and kwargs["tasks"][out_name] == "classification"
    # the stored dataset goes to the facade, which runs on the request's recipe (preset + fields) for this run
    # (tests/data/test_dataset_requests.py): the request carries it whole
    assert ds.recipe == api.dataset(project, "photos").recipe and received.recipe == sent.recipe
    assert api.preprocessing_recipe(file=sent.recipe_file, changes=sent.recipe).layout == "NHWC" != ds.recipe.layout

    calls.clear()
    monkeypatch.setattr(api, "preprocessing_recipe", _stopping(calls, api.preprocessing_recipe))
    sent = RecipeRequest(fields={"resize": "letterbox", "size": "32x48", "scale": "1", "color": "BGR",
                                 "pad_value": "114"})
    assert main([*shlex.split(sent.command("photos", project="request trips data"))[1:], "--json"]) == 0
    (_args, kwargs), = calls
    assert kwargs["changes"] == sent
    stored = json.loads(capsys.readouterr().out)["recipe"]
    assert (stored["resize"], stored["size"], stored["scale"], stored["color"], stored["pad_value"]) == \
        ("letterbox", [32, 48], 1.0, "BGR", 114)

    calls.clear()
    monkeypatch.setattr(api, "make_plugins", _stopping(calls))
    sent = dataclasses.replace(FULL[PluginRequest], impl=None)
    with pytest.raises(_Stop):
        main(shlex.split(sent.command(str(path_of("mmdeploy_grid_sampler")), str(tmp_path / "plugins")))[1:])
    ((handle, received, out), _kwargs), = calls
    assert handle.path == path_of("mmdeploy_grid_sampler") and received == sent and out == tmp_path / "plugins"


def test_add_dataset_with_a_request_imports_what_the_keywords_import():
    """Real import of the sample photos: a ``DatasetAddRequest`` and the same options as keywords give the same
    dataset (samples, split, recipe); a request and keywords at once is one line."""
    project = api.open_project("request trips add", create=True)
    photos = api.sample_photos_folder()
    by_request = api.add_dataset(project, photos, DatasetAddRequest(name="a", preset="caffe", split=0.25, seed=2))
    by_keywords = api.add_dataset(project, photos, name="b", preset="caffe", calibration_fraction=0.25, seed=2)
    assert (len(by_request.calibration), len(by_request.evaluation)) == \
        (len(by_keywords.calibration), len(by_keywords.evaluation))
    assert by_request.calibration == by_keywords.calibration and by_request.recipe == by_keywords.recipe
    assert by_request.recipe.preset == "caffe" and len(by_request.calibration) < len(by_request.evaluation)
    with pytest.raises(StudioError, match="not both") as both:
        api.add_dataset(project, photos, DatasetAddRequest(name="c"), seed=1)
    assert both.value.code == "BAD-REQUEST"
    with pytest.raises(StudioError, match="not both"):
        api.evaluate_on_dataset(by_request, DatasetEvalRequest(model="m.onnx"), engine="openvino")
