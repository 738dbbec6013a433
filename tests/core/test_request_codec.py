"""The one JSON codec of the typed requests (issue 34, item 2): ``studio.core.codec``.

Oracles: values worked out by hand (the JSON each shape must give), ``json.dumps`` (plain JSON values only),
and request dicts written the way the per-request ``to_dict`` methods wrote them before the codec (stored
provenance of kept versions, export manifests and batch stage options must still load)."""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from studio.core.codec import from_json, to_json
from studio.core.errors import StudioError
from studio.core.requests import (REQUESTS, EditRequest, JsonRequest, OptimizeRequest, PrecisionRequest,
                                  ProfileOptions, ProfileRequest)


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Inner:
    colour: Colour = Colour.RED
    folder: Path | None = None
    sizes: tuple[int, ...] = ()


@dataclass(frozen=True)
class Outer:
    inner: Inner = Inner()
    dims: tuple[tuple[str, int], ...] = ()
    nested: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    script: tuple[str, ...] = field(default=(), metadata={"json": "text"})
    maybe: Inner | None = None


def test_nested_dataclasses_enums_paths_pairs_and_tuples_take_their_json_shapes():
    value = Outer(inner=Inner(Colour.BLUE, Path("a dir/x.npz"), (1, 4)), dims=(("batch", 2), ("seq", 8)),
                  nested=(("fold", (("max", 1.5),)),), script=('{"op":"rename"}',), maybe=None)
    data = to_json(value)
    assert data == {"inner": {"colour": "blue", "folder": "a dir/x.npz", "sizes": [1, 4]},
                    "dims": {"batch": 2, "seq": 8}, "nested": {"fold": {"max": 1.5}},
                    "script": [{"op": "rename"}], "maybe": None}
    back = from_json(Outer, json.loads(json.dumps(data)))
    assert isinstance(back.inner, Inner) and back.inner.colour is Colour.BLUE and back.inner.folder == Path("a dir/x.npz")
    assert back.inner.sizes == (1, 4) and back.dims == value.dims and back.nested == value.nested


def test_an_optional_nested_dataclass_is_read_back_as_its_class():
    back = from_json(Outer, {"maybe": {"colour": "red", "folder": None, "sizes": [3]}})
    assert back.maybe == Inner(Colour.RED, None, (3,))


@pytest.mark.parametrize("data, words", [({"colour": "green"}, "Inner"), ({"shade": 1}, "no option(s) shade"),
                                         (["colour"], "must be a mapping")])
def test_unknown_keys_bad_values_and_wrong_shapes_are_one_line(data, words):
    with pytest.raises(StudioError) as info:
        from_json(Inner, data)
    assert words in str(info.value) and "\n" not in str(info.value) and info.value.code == "BAD-REQUEST"


def test_every_request_goes_through_the_one_codec():
    """No request keeps its own copy of to_dict/from_dict: the methods are the base's."""
    for cls in REQUESTS:
        assert issubclass(cls, JsonRequest), cls.__name__
        assert "to_dict" not in vars(cls) and "from_dict" not in vars(cls), cls.__name__
        assert cls.to_dict is JsonRequest.to_dict


# Written by the per-request to_dict methods before the codec (copied from their output, 2026-12-03).
OLD_EDIT = {"check_only": True, "operations": [{"op": "rename", "tensors": {"a": "b"}},
                                               {"name": "alpha", "node": "conv 1", "op": "set_attr", "value": 0.5}],
            "verify": False}
OLD_OPTIMIZE = {"dims": {"batch": 1}, "inputs": "real inputs/x.npz", "on_failure": "revert",
                "pass_options": {"fold-constants": {"max_bytes": 4096}},
                "passes": ["fix-input-shapes", "fold-constants"], "preset": None, "time_budget_s": 90.5, "verify": False}
OLD_PRECISION = {"accuracy_level": 4, "block_size": "32", "calibration": "calib dir/calib.npz",
                 "calibration_method": "entropy", "dataset": "photos", "dims": {"batch": 2, "seq len": 5},
                 "generation_steps": 3, "goal": "top1-agreement>=0.9", "inputs": "eval.npz", "latency_budget_s": 7.0,
                 "preprocess": {"bgr": True, "layout": "NHWC", "mean": [0.5, 0.5, 0.5], "size": [32, 48],
                                "std": [0.25, 0.25, 0.25]}, "ratio": 0.5, "samples": 3, "symmetric": False,
                 "target_cosine": 0.95, "tasks": {"logits": "classification"},
                 "variants": ["fp32", "int8", "int8-weights"]}


def test_stored_provenance_written_the_old_way_still_loads_and_is_written_the_same():
    edit = EditRequest.from_dict(OLD_EDIT)
    assert edit.script == OLD_EDIT["operations"] and edit.check_only and not edit.verify
    optimize = OptimizeRequest.from_dict(OLD_OPTIMIZE)
    assert optimize.passes == ("fix-input-shapes", "fold-constants") and optimize.options == {
        "fold-constants": {"max_bytes": 4096}, "fix-input-shapes": {"dims": {"batch": 1}}}
    precision = PrecisionRequest.from_dict(OLD_PRECISION)
    assert dict(precision.preprocess)["size"] == (32, 48) and precision.symmetric is False
    for old, request in ((OLD_EDIT, edit), (OLD_OPTIMIZE, optimize), (OLD_PRECISION, precision)):
        assert json.dumps(request.to_dict(), sort_keys=True) == json.dumps(old, sort_keys=True)


# A Profile page / `profile --project` job row as stored before ProfileRequest held a ProfileOptions (flat,
# "inputs"/"images" for the paths), copied from the old to_dict's output (its image-folder form).
OLD_PROFILE = {"batch_sizes": [1, 4], "concurrency": [2], "dims": {"batch": 1, "seq len": 16}, "duration_s": 2.5,
               "engines": ["ort", "ov:bf16"], "images": "photos dir", "inputs": None, "iterations": None,
               "memory": True, "memory_gb": 1.5, "memory_iterations": 50, "ov_cache": True, "per_op": True,
               "per_op_runs": 4, "preprocess": {"bgr": True, "layout": "NHWC", "mean": [0.5, 0.5, 0.5],
                                                "size": [32, 48], "std": [0.25, 0.25, 0.25]},
               "rounds": 7, "seed": 5, "sweep_iterations": 9, "thread_counts": [1, 2], "timeout_s": 60.5, "warmup": 3}


def test_a_profile_request_holds_one_profile_options_and_reads_the_old_flat_form():
    """One copy of the profile's fields (ProfileOptions, what the profiler runs), and job rows stored flat
    before that still load: to the same request the old fields describe."""
    assert [f.name for f in dataclasses.fields(ProfileRequest)] == ["engines", "options"]
    request = ProfileRequest.from_dict(OLD_PROFILE)
    o = request.options
    assert isinstance(o, ProfileOptions) and request.engines == ("ort", "ov:bf16")
    assert (o.duration_s, o.iterations, o.images_dir, o.inputs_npz) == (2.5, None, "photos dir", None)
    assert (o.thread_counts, o.batch_sizes, o.dims) == ((1, 2), (1, 4), (("batch", 1), ("seq len", 16)))
    assert dict(o.preprocess) == {"bgr": True, "layout": "NHWC", "mean": (0.5, 0.5, 0.5), "size": (32, 48),
                                  "std": (0.25, 0.25, 0.25)}
    data = request.to_dict()
    assert set(data) == {"engines", "options"} and data["options"]["images_dir"] == "photos dir"
    assert ProfileRequest.from_dict(json.loads(json.dumps(data))) == request
    assert ProfileRequest.from_dict({"engines": ["ort"], "options": {"iterations": 50}, "warmup": 2}).options == \
        ProfileOptions(iterations=50, warmup=2)                 # a batch stage's flat override over its defaults
    with pytest.raises(StudioError) as info:
        ProfileRequest.from_dict({**OLD_PROFILE, "turbo": True})
    assert "turbo" in str(info.value) and info.value.code == "BAD-REQUEST"
