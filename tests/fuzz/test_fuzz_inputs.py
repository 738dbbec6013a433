"""Mutation fuzzing of the studio's other inputs (issue 31 item 11): edit scripts, decoder specs (the
model's cache dims and heads, a genai_config.json / config.json beside it, and the KV budget's length,
batch, memory and KV dtype) and preprocessing recipes are mutated like models are in ``test_fuzz``
(``tests.fuzz.data_mutators``). Every outcome must be success or one clean StudioError line; anything
else is a bug, listed with its seed in ``fuzz-<target>-report.json`` for replay.

Fast tier (``make test``): a few dozen cases per target; ``make fuzz`` (``ONNX_STUDIO_FUZZ_CASES=1000``)
runs 1,000 each. Replay one: ``ONNX_STUDIO_FUZZ_SEED=<seed> pytest tests/fuzz/test_fuzz_inputs.py -k <target>``.
"""

from __future__ import annotations

import collections
import copy
import json
import os
import random
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from studio import api
from studio.core.errors import StudioError
from tests.conftest import SAMPLES
from tests.fuzz.data_mutators import mutate_data, mutate_text, to_text
from tests.fuzz.mutators import mutate

pytestmark = pytest.mark.fuzz
FAST_CASES = 40


def _seeds() -> list[int]:
    if os.environ.get("ONNX_STUDIO_FUZZ_SEED"):
        return [int(os.environ["ONNX_STUDIO_FUZZ_SEED"])]
    return list(range(int(os.environ.get("ONNX_STUDIO_FUZZ_CASES", str(FAST_CASES)))))


def _clean(exc: StudioError) -> str:
    msg = str(exc)
    assert "\n" not in msg and "Traceback" not in msg, msg
    try:
        msg.encode("utf-8")               # printable on a UTF-8 terminal
    except UnicodeEncodeError:
        raise AssertionError(f"the message holds a lone surrogate: {ascii(msg)[:200]}") from None
    return f"{exc.code}"


def _campaign(name: str, one: Callable[[int, Path], str], folder: Path) -> None:
    """Run every seed; outcomes counted, anything but success or a clean StudioError listed and failed."""
    outcomes: collections.Counter[str] = collections.Counter()
    failures = []
    for seed in _seeds():
        case = folder / f"case{seed}"
        case.mkdir()
        try:
            outcomes[one(seed, case)] += 1
        except StudioError as exc:
            try:
                outcomes[_clean(exc)] += 1
            except AssertionError as bad:
                failures.append({"seed": seed, "error": f"unclean message: {str(bad)[:300]!r}"})
        except Exception as exc:   # noqa: BLE001 - not a StudioError: a bug to fix
            failures.append({"seed": seed, "error": f"{type(exc).__name__}: {str(exc)[:300]!r}",
                             "trace": traceback.format_exc()[-1500:]})
    report = {"target": name, "cases": sum(outcomes.values()) + len(failures),
              "outcomes": dict(outcomes.most_common()), "failures": failures}
    out = Path(os.environ.get("ONNX_STUDIO_ARTIFACTS", folder))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"fuzz-{name}-report.json").write_text(json.dumps(report, indent=2, ensure_ascii=True))
    print(json.dumps({k: v for k, v in report.items() if k != "failures"}, indent=1))
    assert not failures, f"{len(failures)} unclean outcomes of {name}; replay with ONNX_STUDIO_FUZZ_SEED: " + \
        json.dumps(failures[:3], indent=1, ensure_ascii=True)


# ---------------------------------------------------------------------------- edit scripts

DETECTOR = """<ir_version: 8, opset_import: ["" : 17]>
det (float[1,3,8,8] image) => (float[1,4,8,8] boxes, float[1,4,8,8] scores)
<float[4,3,3,3] w1 = {%s}, float[4,4,1,1] w2 = {%s}, float[4] b1 = {0.1, -0.2, 0.3, 0.0}> {
  c1 = Conv <pads = [1,1,1,1]> (image, w1, b1)
  feat = Relu(c1)
  same = Identity(feat)
  head = Conv(same, w2)
  boxes = Mul(head, head)
  scores = Sigmoid(head)
}"""
PRE = """<ir_version: 8, opset_import: ["" : 17]>
pre (uint8[1,3,8,8] raw) => (float[1,3,8,8] norm) <float[1] s = {0.5}> {
  f = Cast <to = 1> (raw)
  norm = Mul(f, s)
}"""
# Valid operations on the detector (node names: conv0 relu1 identity2 conv3 mul4 sigmoid5): the seeds.
BASE_OPS: list[dict] = [
    {"op": "rename", "tensors": {"feat": "features", "boxes": "scores", "scores": "boxes"}, "nodes": {"conv0": "c"}},
    {"op": "add_output", "tensor": "feat"},
    {"op": "remove_outputs", "outputs": ["boxes"]},
    {"op": "set_input", "input": "image", "dims": {"0": "batch"}},
    {"op": "set_input", "input": "image", "shape": [1, 3, 8, 8], "dtype": "float32"},
    {"op": "set_attr", "node": "conv3", "name": "group", "value": 1},
    {"op": "remove_attr", "node": "conv0", "name": "pads"},
    {"op": "insert", "tensor": "feat", "op_type": "Cast", "attrs": {"to": "float16"}, "consumers": ["identity2"]},
    {"op": "insert", "tensor": "head", "op_type": "Identity", "name": "id_new", "output": "head_id"},
    {"op": "rewire", "node": "sigmoid5", "input": 0, "tensor": "feat"},
    {"op": "bypass", "node": "identity2"},
    {"op": "delete", "node": "mul4"},
    {"op": "extract", "inputs": ["feat"], "outputs": ["boxes"]},
    {"op": "split", "cut": ["feat"]},
    {"op": "add_opset", "domain": "com.example", "version": 1},
    {"op": "replace_initializer", "name": "w2", "npy": "w2.npy"},
    {"op": "merge", "model": "pre.onnx", "io_map": [["norm", "image"]], "prefix": "pre/"},
]


def _floats(n: int, seed: int) -> str:
    return ", ".join(f"{x:.4f}" for x in np.random.default_rng(seed).normal(size=n))


def _edit_folder(folder: Path) -> Path:
    m = onnx.parser.parse_model(DETECTOR % (_floats(108, 1), _floats(16, 2)))
    for i, n in enumerate(m.graph.node):
        n.name = f"{n.op_type.lower()}{i}"
    onnx.save(m, folder / "det.onnx")
    onnx.save(onnx.parser.parse_model(PRE), folder / "pre.onnx")
    np.save(folder / "w2.npy", np.ones((4, 4, 1, 1), np.float32))
    return folder / "det.onnx"


def _one_edit(seed: int, folder: Path, source: Path) -> str:
    rng = random.Random(seed)
    ops = copy.deepcopy(rng.sample(BASE_OPS, rng.randint(1, 3)))
    data, _ = mutate_data(ops, rng, rounds=1) if rng.random() < 0.6 else (ops, [])
    text = to_text(data, rng)
    if rng.random() < 0.1:
        text, _ = mutate_text(text, rng)
    script = folder / ("edits.yaml" if rng.random() < 0.2 else "edits.json")
    script.write_text(text, encoding="utf-8", errors="surrogatepass")
    parsed = api.edit_script(script)
    handle = api.load(source)
    if seed % 4 == 3:                    # a quarter written and verified on ORT, the rest validated in memory
        result = api.edit(handle, parsed, folder / "out" / "edited.onnx")
    else:
        result = api.validate_edit_script(handle, parsed)
    json.dumps(result.to_dict(), ensure_ascii=True)     # the report can be printed and stored
    return "ok"


@pytest.mark.timeout(max(300, 3 * len(_seeds())))
def test_fuzz_edit_scripts(tmp_path):
    source = _edit_folder(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()

    def one(seed: int, case: Path) -> str:
        for name in ("pre.onnx", "w2.npy"):            # relative paths in a script are read beside it
            (case / name).write_bytes((tmp_path / name).read_bytes())
        return _one_edit(seed, case, source)

    _campaign("edit-scripts", one, runs)
    assert (tmp_path / "det.onnx").read_bytes() == source.read_bytes()


# ---------------------------------------------------------------------------- decoder specs and KV budgets

DECODERS = ("gpt2_decoder.onnx", "gpt2_decoder_with_past.onnx", "gpt2_decoder_merged.onnx", "llama_optimum.onnx",
            "llama_genai.onnx")
GENAI_CONFIG = {"model": {"context_length": 96, "vocab_size": 320, "decoder": {
    "filename": "model.onnx", "num_attention_heads": 6, "num_key_value_heads": 2, "hidden_size": 48,
    "head_size": 8, "num_hidden_layers": 3}}, "search": {"max_length": 96, "past_present_share_buffer": True}}
HF_CONFIG = {"model_type": "llama", "num_attention_heads": 6, "num_key_value_heads": 2, "hidden_size": 48,
             "vocab_size": 320, "max_position_embeddings": 96}
# The KV budget's options as the CLI and the page hand them over: integers of any size for length and
# batch, a memory size as text or bytes, a KV dtype as text (the CLI offers choices, the API takes any).
MEMORY = ["16GiB", "0", "-1G", "1e400GiB", "10" * 200, "nan", "", "16 XB", "9" * 30 + "GiB", "1KiB", 0, -5, 2**64,
          10**400, 1 << 30]
KV_DTYPES = ["fp16", "fp32", "int8", "int4", "bf16", "fp8", "", "float8", "x" * 200, "INT4"]
EXTREME_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**63, 10**400, -(10**30)]


def _budget_options(rng: random.Random) -> dict:
    """length, batch, memory and KV dtype: the usual values, or (each 20 % of cases) an odd one."""
    odd = rng.random
    return {"length": rng.choice(EXTREME_INTS + [None]) if odd() < 0.2 else 64,
            "batch": rng.choice(EXTREME_INTS) if odd() < 0.2 else 1,
            "memory": rng.choice(MEMORY) if odd() < 0.2 else "16GiB",
            "kv_dtype": rng.choice(KV_DTYPES) if odd() < 0.2 else None}


def _cache_dims(m: onnx.ModelProto, rng: random.Random) -> str:
    """One dim of a past/present cache tensor set to 0, -1, a huge or a symbolic value."""
    vis = [vi for vi in (*m.graph.input, *m.graph.output) if ("past" in vi.name or "present" in vi.name)
           and vi.type.tensor_type.shape.dim]
    if not vis:
        return "no cache"
    vi = rng.choice(vis)
    d = rng.choice(list(vi.type.tensor_type.shape.dim))
    value = rng.choice([0, 1, 2**31, 2**40, 2**62, "heads", ""])
    if isinstance(value, str):
        d.dim_param = value
    else:
        d.dim_value = value
    return f"cache dim of {vi.name}"


def _head_attrs(m: onnx.ModelProto, rng: random.Random) -> str:
    """num_heads / kv_num_heads of an attention node set to 0, negative or huge."""
    attrs = [a for n in m.graph.node for a in n.attribute if a.name in ("num_heads", "kv_num_heads", "head_size")]
    if not attrs:
        return "no head attributes"
    a = rng.choice(attrs)
    a.i = rng.choice([0, -1, 1, 2**31, 2**62, 3])
    return f"attribute {a.name}"


def _one_decoder(seed: int, folder: Path) -> str:
    rng = random.Random(seed)
    name = DECODERS[seed % len(DECODERS)]
    roll = rng.random()
    if roll < 0.25:                                 # the generic model mutators
        data, _ = mutate((SAMPLES / name).read_bytes(), seed)
        (folder / "model.onnx").write_bytes(data)
    else:
        m = onnx.load(str(SAMPLES / name))
        for _ in range(rng.randint(0, 2)):
            rng.choice([_cache_dims, _head_attrs])(m, rng)
        onnx.save(m, str(folder / "model.onnx"))
    if rng.random() < 0.5:                          # a runtime config beside the model, mutated
        config, file = (copy.deepcopy(GENAI_CONFIG), "genai_config.json") if rng.random() < 0.6 else \
            (copy.deepcopy(HF_CONFIG), "config.json")
        config, _ = mutate_data(config, rng, rounds=1)
        text = to_text(config, rng)
        if rng.random() < 0.1:
            text, _ = mutate_text(text, rng)
        (folder / file).write_text(text, encoding="utf-8", errors="surrogatepass")
    kwargs = _budget_options(rng)
    path = folder / "model.onnx"
    spec = api.decoder_spec(path)
    if spec is None:
        return "not a decoder"
    report = api.inspect_decoder(path, **kwargs)
    json.dumps(report.to_dict() if hasattr(report, "to_dict") else str(report), ensure_ascii=True, default=str)
    budget = api.kv_budget(report, **_budget_options(rng))
    str(budget)
    return "ok"


@pytest.mark.timeout(max(300, 2 * len(_seeds())))
def test_fuzz_decoder_specs(tmp_path):
    _campaign("decoder-specs", _one_decoder, tmp_path)


# ---------------------------------------------------------------------------- preprocessing recipes

PHOTO_SIDE = 48
MAX_APPLIED_PIXELS = 1024 * 1024       # larger sizes are checked for a refusal, not allocated here


def _recipe_dict(recipe) -> dict:
    """A recipe's fields as JSON data (what a recipe file holds)."""
    import dataclasses

    return json.loads(json.dumps(dataclasses.asdict(recipe)))


def _one_recipe(seed: int, folder: Path) -> str:
    from PIL import Image

    from studio.core import preprocess as pp

    rng = random.Random(seed)
    names = list(api.recipe_choices()["preset"])
    base = _recipe_dict(pp.PRESETS[rng.choice(names)]) if rng.random() < 0.7 else {}
    data, _ = mutate_data(base, rng, rounds=1) if rng.random() < 0.6 else (base, [])
    text = to_text(data, rng)
    if rng.random() < 0.1:
        text, _ = mutate_text(text, rng)
    file = folder / "recipe.json"
    file.write_text(text, encoding="utf-8", errors="surrogatepass")
    recipe = api.preprocessing_recipe(file=file)
    recipe.describe()
    json.dumps(_recipe_dict(recipe), ensure_ascii=True)
    shape = rng.choice([(1, 3, 32, 32), (1, 32, 32, 3), (1, 3, "h", "w"), (1, 1, 16, 16)])
    layout = pp.channel_layout(shape, recipe.layout)
    size = pp.image_size_of(shape, layout, recipe, hint=(24, 24) if rng.random() < 0.5 else None)
    if size[0] * abs(size[1]) > MAX_APPLIED_PIXELS:
        return "not applied: larger than 1 Mpixel"
    rgb = np.random.default_rng(seed).integers(0, 256, (PHOTO_SIDE, PHOTO_SIDE + 8, 3), dtype=np.uint8)
    image = Image.fromarray(rgb)
    tensor = pp.apply_recipe(image, recipe, size, layout, rng.choice(["float32", "float16", "uint8"]),
                             channels=shape[1] if layout == "NCHW" else shape[3])
    if tensor.dtype.kind == "f" and not np.isfinite(tensor).all():
        return "ok: non-finite tensor (no warning)"
    return "ok"


@pytest.mark.timeout(max(300, 1 * len(_seeds())))
def test_fuzz_recipes(tmp_path):
    _campaign("recipes", _one_recipe, tmp_path)


@pytest.mark.parametrize("recursion_limit", [None, 20_000], ids=["default-limit", "raised-limit"])
@pytest.mark.parametrize("file", ["genai_config.json", "config.json"])
def test_a_runtime_config_nested_thousands_deep_beside_a_decoder_is_ignored(tmp_path, file, recursion_limit):
    """Found by the decoder-spec fuzz (RecursionError from json.loads in decoder_config): the file is not
    a config the studio can read, so the graph's own facts are used. With a raised recursion limit (CI's
    workers had one) the JSON parses, but its ``model`` is not an object: still no runtime config."""
    (tmp_path / "model.onnx").write_bytes((SAMPLES / "llama_genai.onnx").read_bytes())
    (tmp_path / file).write_text('{"model_type": "llama", "model": ' + "[" * 5000 + "]" * 5000 + "}")
    before = sys.getrecursionlimit()
    try:
        if recursion_limit:
            sys.setrecursionlimit(recursion_limit)
        spec = api.decoder_spec(tmp_path / "model.onnx")
    finally:
        sys.setrecursionlimit(before)
    assert spec is not None and spec.runtime is None and spec.layers == 3


@pytest.mark.parametrize("text", ['{"mean": ' + "[" * 5000 + "]" * 5000 + "}", '{"scale": ' + "9" * 5000 + "}"])
def test_a_recipe_nested_thousands_deep_or_with_a_5000_digit_number_is_one_line(tmp_path, text):
    """Found by the recipe fuzz (RecursionError from json.loads in recipe_from_json)."""
    (tmp_path / "r.json").write_text(text)
    with pytest.raises(StudioError) as err:
        api.preprocessing_recipe(file=tmp_path / "r.json")
    assert "\n" not in str(err.value) and "recipe" in str(err.value)


def test_a_byte_count_beyond_any_float_is_shown_by_its_digits():
    """Found by the decoder-spec fuzz (seed 418: a cache of 2^62-sized dims made kv_budget's message divide a
    300-digit integer into a float: OverflowError)."""
    from studio.core.fmt import human_bytes

    assert human_bytes(10**400) == "a 401-digit number B" and human_bytes(3 * 2**30) == "3.0 GiB"
