"""The requests of the hints that had none (issue 34, item 2): compare, plugin, graph, inspect, data add, data
eval and data recipe. Each request, with every field set away from its default (the list of fields read from
``dataclasses.fields``, so a new field fails here until it is covered), survives JSON, and prints a command
the real CLI parser reads back into the same values (the oracle: ``build_parser`` and the CLI's own readers,
``parse_dims``, ``parse_task_options``, ``recipe_args.recipe_changes``). The facade no longer has a hint builder
(``api.cli_command``): the pages show these requests' ``command()``."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from studio import api
from studio.cli import build_parser, recipe_args
from studio.cli.common import parse_dims, parse_options
from studio.core.errors import StudioError
from studio.core.requests import (HINT_REQUESTS, CheckRequest, CompareRequest, DatasetAddRequest,
                                  DatasetEvalRequest, GraphRequest, InspectRequest, OptimizeRequest,
                                  PluginRequest, RecipeRequest)

FULL = {
    CompareRequest: CompareRequest(engine="openvino", engine_b="ov", ov_precision="bf16", ov_precision_b="f16",
                                   dims={"batch": 2, "seq len": 5}, count=4, inputs="real inputs/x.npz",
                                   images="photo dir", dataset="photos", layerwise=True, layer_threshold=0.25,
                                   tasks={"logits": "classification"}, goal="top1-agreement>=0.9"),
    PluginRequest: PluginRequest(op="mmdeploy::grid_sampler", targets=("ort-python", "ort-cpp"),
                                 impl="my impl.py", run=False, build=True, dims={"batch": 1}),
    GraphRequest: GraphRequest(dims={"batch": 1}, level=2, overlay="numeric error", search="conv 1",
                               focus="node 7", hops=3, group="/encoder/layer.0", diff_mode="side-by-side",
                               renderer="boxes"),
    InspectRequest: InspectRequest(dims={"batch": 1, "seq": 8}, decoder=True, kv_length=4096, batch=4,
                                   memory_gib=15.5, kv_dtype="fp16"),
    DatasetAddRequest: DatasetAddRequest(name="val images", kind="image", model="my model.onnx", preset="caffe",
                                         split=0.25, seed=3, tokenizer="tok dir/tokenizer.json", seq_len=64,
                                         length=16000, recipe_file="my recipe.json",
                                         recipe=RecipeRequest(fields={"size": "320x320", "color": "BGR"})),
    DatasetEvalRequest: DatasetEvalRequest(model="my model.onnx", engine="openvino", goal="top1-agreement>=0.99",
                                           tasks={"logits": "classification"}, candidate="cand v2.onnx", part="all",
                                           limit=7, recipe_file="caffe",
                                           recipe=RecipeRequest(fields={"mean": "1,2,3", "crop_ratio": "0.9"})),
    RecipeRequest: RecipeRequest(fields={"resize": "letterbox", "size": "320x320", "scale": "1/255",
                                         "mean": "0,0,0", "std": "1,1,1", "color": "BGR", "layout": "NHWC",
                                         "dtype": "float16", "interpolation": "nearest", "pad_value": "114",
                                         "crop_ratio": "0.875"}),
}


def _args(command: str):
    words = shlex.split(command)
    assert words[0] == "onnx-studio"
    return build_parser().parse_args(words[1:])


def _read_back(request, command: str) -> dict:
    """The values the CLI's parser reads from ``command``, in the request's field names."""
    a = _args(command)
    tasks = dict(api.parse_task_options(getattr(a, "tasks", None)))
    if isinstance(request, CompareRequest):
        return {"engine": a.engine, "engine_b": a.engine_b, "ov_precision": a.ov_precision,
                "ov_precision_b": a.ov_precision_b, "dims": parse_dims(a.dim), "count": a.count, "inputs": a.inputs,
                "images": a.images, "dataset": a.dataset, "layerwise": a.layerwise,
                "layer_threshold": a.layer_threshold, "tasks": tasks, "goal": a.goal}
    if isinstance(request, PluginRequest):
        return {"op": a.op, "targets": a.target, "impl": a.impl, "run": not a.no_run, "build": a.build,
                "dims": parse_dims(a.dim)}
    if isinstance(request, GraphRequest):
        return {"dims": parse_dims(a.dim), "level": a.level, "overlay": a.overlay, "search": a.search,
                "focus": a.focus, "hops": a.hops, "group": a.group, "diff_mode": a.diff_mode,
                "renderer": a.renderer}
    if isinstance(request, InspectRequest):
        return {"dims": parse_dims(a.dim), "decoder": a.decoder, "kv_length": a.kv_length, "batch": a.batch,
                "memory_gib": api.parse_memory(a.memory) / 2**30 if a.memory else None, "kv_dtype": a.kv_dtype}
    if isinstance(request, DatasetAddRequest):
        return {"name": a.name, "kind": a.kind, "model": a.model, "preset": a.preset, "split": a.split,
                "seed": a.seed, "tokenizer": a.tokenizer, "seq_len": a.seq_len, "length": a.length,
                "recipe_file": a.recipe, "recipe": {"fields": recipe_args.recipe_changes(a)}}
    if isinstance(request, DatasetEvalRequest):
        return {"model": a.model, "engine": a.engine, "goal": a.goal, "tasks": tasks, "candidate": a.candidate,
                "part": a.part, "limit": a.limit, "recipe_file": a.recipe,
                "recipe": {"fields": recipe_args.recipe_changes(a)}}
    return {"fields": recipe_args.recipe_changes(a)}


def _command(request) -> str:
    if isinstance(request, CompareRequest):
        return request.command("my model.onnx", "b.onnx")
    if isinstance(request, GraphRequest):
        return request.command("my model.onnx", "diff.html", diff="b v2.onnx")
    if isinstance(request, (DatasetAddRequest, DatasetEvalRequest, RecipeRequest)):
        return request.command("photo set", project="team's project")
    return request.command("my model.onnx")


def _as_json(request) -> dict:
    return json.loads(json.dumps(request.to_dict()))


@pytest.mark.parametrize("kind", HINT_REQUESTS, ids=lambda k: k.__name__)
def test_every_field_is_set_and_survives_json(kind):
    full, default = FULL[kind], kind()
    same = [f.name for f in dataclasses.fields(kind) if getattr(full, f.name) == getattr(default, f.name)]
    assert same == [], f"set these away from their defaults in FULL[{kind.__name__}]: {same}"
    for request in (full, default):
        assert kind.from_dict(_as_json(request)) == request


@pytest.mark.parametrize("kind", HINT_REQUESTS, ids=lambda k: k.__name__)
def test_the_cli_reads_each_command_back_as_the_requests_values(kind):
    request = FULL[kind]
    got = _read_back(request, _command(request))
    want = _as_json(request)
    if kind is PluginRequest:
        want["targets"] = ",".join(want["targets"])
    if kind is RecipeRequest:
        want["fields"] = {k: v for k, v in want["fields"].items() if v}
    if kind is CompareRequest:              # random samples are counted only when no file or dataset is named
        assert got.pop("count") == 2
        want.pop("count")
        assert _read_back(request, CompareRequest(count=4).command("a", "b"))["count"] == 4
    assert got == want, _command(request)


def test_the_defaults_print_only_what_the_cli_needs():
    assert CompareRequest().command("a.onnx", "b.onnx") == "onnx-studio compare a.onnx b.onnx --engine ort"
    assert GraphRequest().command("m.onnx") == "onnx-studio graph m.onnx -o graph.html"
    assert InspectRequest().command("m.onnx") == "onnx-studio inspect m.onnx"
    assert PluginRequest(op="d::Op").command("m.onnx") == "onnx-studio plugin m.onnx --op d::Op -o plugins"
    assert RecipeRequest().command("ds", project="p") == "onnx-studio data recipe ds --project p"


def test_an_openvino_precision_is_printed_only_for_an_openvino_side():
    """The CLI applies ``--ov-precision`` to OpenVINO only, and B's precision defaults to A's: the command
    names B's own when it differs (the page's old hint dropped B's f32 when A ran bf16)."""
    a = _args(CompareRequest(engine="openvino", ov_precision="bf16", ov_precision_b="f32").command("m.onnx", "m.onnx"))
    assert (a.engine, a.engine_b, a.ov_precision, a.ov_precision_b) == ("openvino", None, "bf16", "f32")
    b = _args(CompareRequest(engine="ort", engine_b="openvino", ov_precision="f32", ov_precision_b="bf16")
              .command("m.onnx", "m.onnx"))
    assert (b.engine, b.engine_b, b.ov_precision, b.ov_precision_b) == ("ort", "openvino", "f32", "bf16")
    assert "--ov-precision" not in CompareRequest(engine="ort", engine_b="mnn", ov_precision_b="bf16").command("a", "b")
    assert CompareRequest(engine="ort", engine_b="mnn", ov_precision_b="bf16").ov_precision_b is None


def test_a_check_with_a_fix_prints_the_fix_its_options_and_the_output():
    fix = OptimizeRequest(passes=("fix-input-shapes",), pass_options={"fix-input-shapes": {"dims": {"batch": 1}}})
    a = _args(CheckRequest(engines=("onnxruntime",), dims={"batch": 1}).command("m.onnx", fix=fix, output="fixed.onnx"))
    assert a.fix == ["fix-input-shapes"] and a.output == "fixed.onnx" and parse_dims(a.dim) == {"batch": 1}
    assert parse_options(a.options) == {"fix-input-shapes": {"dims": {"batch": 1}}}
    assert "--output" not in CheckRequest().command("m.onnx", output="fixed.onnx")   # no fix, no output


def test_the_facade_has_no_hint_builder():
    """Issue 34 item 3: studio.api takes requests and returns results; hint command lines are the requests'."""
    assert "cli_command" not in api.__all__ and not hasattr(api, "cli_command")


def test_a_recipe_request_refuses_a_field_data_recipe_does_not_have():
    with pytest.raises(StudioError) as info:
        RecipeRequest(fields={"gamma": "2"})
    assert "gamma" in str(info.value) and info.value.code == "BAD-OPTION"


@pytest.mark.parametrize("memory", ["16GiB", "16GB", "1536MiB", "1000", "1"])
def test_the_inspect_hint_names_any_memory_the_cli_read_so_it_reads_it_back(memory):
    """--memory goes into the request as GiB (a float); the hint must print a size the parser reads back to
    the same bytes (a float repr such as 9.3e-10GiB is refused). Oracle: the CLI's own parser."""
    from studio.facade.inspect import parse_memory
    gib = parse_memory(memory) / 2**30
    hint = InspectRequest(decoder=True, memory_gib=gib).command("m.onnx")
    printed = hint.split("--memory ", 1)[1].split()[0]
    assert parse_memory(printed) == parse_memory(memory)
