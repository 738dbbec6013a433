"""Numbers outside their domain (R64, issue 31 item 6): a decoder whose cache has a head dim of 0 or 0 KV
heads, a context, KV length, batch or memory of 10^400, ``memory --dim N=10^400`` and ``profile --generate
--prompt-lengths 1000000000`` are each one line naming the item and its domain, before any work.

Before the change these were a ZeroDivisionError, a budget of "0 tokens ... up to batch 0", OverflowErrors in
float conversions and a 7.45 GiB allocation."""

from __future__ import annotations

import onnx
import pytest

from studio import api
from studio.cli import main
from studio.core.bounds import MAX_DIM, OutOfRange, bounded_int, number_text
from tests.conftest import SAMPLES, assert_user_message

BIG = 10**400
DECODER = SAMPLES / "gpt2_decoder_with_past.onnx"


def _cache_variant(tmp_path, axis: int, value: int):
    """The sample decoder with every past/present cache's ``axis`` fixed at ``value``."""
    m = onnx.load(str(DECODER))
    for vi in [*m.graph.input, *m.graph.output]:
        if vi.name.startswith(("past_key_values.", "present.")):
            d = vi.type.tensor_type.shape.dim[axis]
            d.Clear()
            d.dim_value = value
    path = tmp_path / f"cache_axis{axis}_{value}.onnx"
    onnx.save(m, str(path))
    return path


def _metadata_context(tmp_path, context: str):
    """The sample decoder with its position_ids input renamed (so no position table gives the context) and
    a metadata ``context_length``: the context comes from the metadata."""
    m = onnx.load(str(DECODER))
    for vi in m.graph.input:
        if vi.name == "position_ids":
            vi.name = "pos"
    for n in m.graph.node:
        for i, x in enumerate(n.input):
            if x == "position_ids":
                n.input[i] = "pos"
    m.metadata_props.add(key="context_length", value=context)
    path = tmp_path / "metadata_context.onnx"
    onnx.save(m, str(path))
    return path


def test_bounded_int_names_the_item_and_the_domain():
    assert bounded_int(5, "x") == 5 and bounded_int(MAX_DIM, "x") == MAX_DIM
    for bad, shown in ((0, "is 0"), (-3, "is -3"), (MAX_DIM + 1, "2,147,483,648"), (BIG, "401-digit number"),
                       (-BIG, "401-digit negative number"), (1.5, "got 1.5"), (True, "got True")):
        with pytest.raises(OutOfRange) as e:
            bounded_int(bad, "the widget")
        assert_user_message(str(e.value), "the widget", shown, "2,147,483,647")
    assert number_text(10**5000) == "a 4000+-digit number"      # never str() past Python's 4,300-digit limit


@pytest.mark.parametrize("axis, value, item", [(3, 0, "head dim is 0"), (1, 0, "KV head count is 0")])
def test_zero_cache_sizes_are_one_line_on_every_decoder_view(tmp_path, axis, value, item):
    path = _cache_variant(tmp_path, axis, value)
    for call in (lambda: api.inspect_decoder(path), lambda: api.decoder_spec(path),
                 lambda: api.memory_plan(api.load(path))):
        with pytest.raises(OutOfRange) as e:
            call()
        assert_user_message(str(e.value), item, "from 1 to 2,147,483,647", "past_key_values.0.key")


@pytest.mark.parametrize("argv", [["inspect", "{m}", "--decoder"], ["memory", "{m}", "--no-measure"]])
def test_zero_head_dim_cli(capsys, tmp_path, argv):
    path = _cache_variant(tmp_path, 3, 0)
    assert main([a.replace("{m}", str(path)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ")
    assert_user_message(err, "head dim is 0")


def test_context_of_ten_to_the_400_from_metadata(tmp_path):
    with pytest.raises(OutOfRange) as e:
        api.inspect_decoder(_metadata_context(tmp_path, "1" + "0" * 400))
    assert_user_message(str(e.value), "context length", "401-digit number", "metadata context_length")
    assert api.decoder_spec(_metadata_context(tmp_path, "4096")).context == 4096   # an ordinary one is read


def test_budget_request_out_of_domain():
    report = api.inspect_decoder(DECODER)
    for kwargs, needle in ((dict(batch=BIG), "batch"), (dict(length=BIG), "KV length"), (dict(batch=0), "batch"),
                           (dict(length=0), "KV length"), (dict(memory=BIG), "memory (bytes)"),
                           (dict(memory="1" + "0" * 400 + "GiB"), "out of range"),
                           (dict(memory=str(2**64)), "2^63 - 1 bytes")):
        with pytest.raises(OutOfRange) as e:
            api.kv_budget(report, **kwargs)
        assert_user_message(str(e.value), needle)
    assert api.kv_budget(report, memory="16GiB", batch=4, length=32).max_batch > 4      # in domain: answered


@pytest.mark.parametrize("argv, needle", [
    (["inspect", str(DECODER), "--decoder", "--kv-length", str(BIG)], "--kv-length"),
    (["inspect", str(DECODER), "--decoder", "--batch", str(BIG)], "--batch"),
    (["inspect", str(DECODER), "--decoder", "--batch", "0"], "--batch"),
    (["profile", str(DECODER), "--generate", "--prompt-lengths", f"1,{BIG}"], "--prompt-lengths"),
])
def test_cli_options_out_of_domain_are_usage_errors(capsys, argv, needle):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert_user_message(err, needle, "from 1 to ")


@pytest.mark.parametrize("argv, needle", [
    (["inspect", str(DECODER), "--decoder", "--memory", "1" + "0" * 400 + "GiB"], "memory"),
    (["memory", str(DECODER), "--no-measure", "--dim", f"batch_size={BIG}"], "--dim batch_size is a 401-digit"),
    (["memory", str(DECODER), "--no-measure", "--dim", "batch_size=0"], "--dim batch_size is 0"),
    (["profile", str(DECODER), "--generate", "--prompt-lengths", "1000000000"], "prompt lengths is 1,000,000,000"),
    (["profile", str(DECODER), "--generate", "--new-tokens", str(BIG)], "new tokens"),
    (["profile", str(DECODER), "--generate", "--prompt-lengths", "5000000", "--batch", "4"], "at most 16,777,216"),
])
def test_cli_values_out_of_domain_are_one_line(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ")
    assert_user_message(err, needle)


def test_generation_request_bounds_before_any_allocation():
    with pytest.raises(OutOfRange) as e:
        api.GenerationOptions(prompt_lengths=(1_000_000_000,))
    assert_user_message(str(e.value), "prompt lengths", "1,000,000,000", "16,777,216")
    with pytest.raises(OutOfRange):
        api.GenerationOptions(generations=BIG)


# Budgets, steps and shares in the operation requests themselves, so every door refuses them before any work: the
# CLI, a page, a batch stage request and a remote target's JSON (a negative precision budget ran, a negative
# optimize budget ran every pass and then wrote nothing).
MODEL = str(SAMPLES / "cnn_unfused.onnx")


@pytest.mark.parametrize("argv, needle", [
    (["precision", MODEL, "--budget", "-1"], "latency budget must be a positive number of seconds"),
    (["precision", MODEL, "--budget", "nan"], "got nan"),
    (["precision", MODEL, "--steps", "0"], "generation steps is 0"),
    (["precision", MODEL, "--ratio", "1.5"], "ratio (the share of layers in int4) must be in (0, 1]"),
    (["optimize", MODEL, "-o", "never.onnx", "--time-budget", "-3"], "time budget must be a positive number"),
    (["optimize", MODEL, "-o", "never.onnx", "--time-budget", "inf"], "got inf"),
])
def test_budgets_out_of_domain_are_one_line_before_any_work(capsys, tmp_path, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert_user_message(err, needle)
    assert list(tmp_path.iterdir()) == []                       # nothing written, nothing run


@pytest.mark.parametrize("kind, data", [
    ("precision", {"latency_budget_s": -1}), ("precision", {"samples": 0}), ("precision", {"target_cosine": 1.5}),
    ("precision", {"generation_steps": -2}), ("optimize", {"time_budget_s": 0}),
])
def test_a_request_from_json_refuses_numbers_out_of_domain(kind, data):
    """What a page, a batch stage file or a remote target hands over is checked by the request itself."""
    from studio.core.requests import BatchRequest, OptimizeRequest, PrecisionRequest

    cls = {"precision": PrecisionRequest, "optimize": OptimizeRequest}[kind]
    with pytest.raises(OutOfRange):
        cls.from_dict(data)
    with pytest.raises(OutOfRange):
        BatchRequest(stages=(kind,), stage_requests={kind: data})


@pytest.mark.parametrize("argv, needle", [
    (["--timeout", "-5", "inspect", MODEL], "--timeout: it must be a positive number, got -5"),
    (["--memory-gb", "0", "inspect", MODEL], "--memory-gb: it must be a positive number, got 0"),
    (["--timeout", "nan", "inspect", MODEL], "got nan"),
])
def test_worker_limits_out_of_domain_are_usage_errors(capsys, argv, needle):
    """A negative time limit reached the sandbox worker, whose inspect then said 'inference incomplete'."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert_user_message(capsys.readouterr().err.strip().splitlines()[-1], needle)


@pytest.mark.parametrize("kind, data, needle", [
    ("CompareRequest", {"layerwise": True, "layer_threshold": -1}, "layer threshold"),
    ("CompareRequest", {"count": 0}, "count"), ("MemoryRequest", {"measure_timeout_s": -5}, "time limit"),
    ("GraphRequest", {"level": 0}, "level"), ("GraphRequest", {"focus": "n", "hops": -2}, "hops"),
    ("DatasetAddRequest", {"split": 1.5}, "calibration fraction"), ("DatasetAddRequest", {"seq_len": 0}, "seq len"),
    ("DatasetAddRequest", {"seed": -1}, "seed"), ("DatasetEvalRequest", {"limit": 0}, "limit"),
    ("InspectRequest", {"kv_length": 0}, "KV length"), ("InspectRequest", {"batch": 0}, "batch"),
    ("InspectRequest", {"memory_gib": -1}, "memory"), ("ExportRequest", {"max_batch": 0}, "max batch"),
    ("CheckRequest", {"dims": {"batch": 0}}, "dim batch"), ("OptimizeRequest", {"dims": {"batch": -2}}, "dim batch"),
    ("ProfileRequest", {"options": {"dims": {"b": 0}}}, "dim b"),
])
def test_every_request_checks_its_numbers(kind, data, needle):
    """Each operation's request refuses a number out of its domain in one line, whichever door built it (a
    layer threshold of -1 reported the first layer of two identical models as diverging)."""
    import studio.core.requests as requests

    with pytest.raises(OutOfRange) as e:
        getattr(requests, kind).from_dict(data)
    assert_user_message(str(e.value), needle)


def test_a_refused_data_add_leaves_no_project(tmp_path, capsys, monkeypatch):
    root = tmp_path / "projects"
    monkeypatch.setenv("ONNX_STUDIO_PROJECTS_ROOT", str(root))
    photos = str(SAMPLES / "photos")
    for argv in (["--split", "1.5"], ["--mean", "1,2"]):
        assert main(["data", "add", photos, "--project", "p", *argv]) == 2
        capsys.readouterr()
    assert main(["data", "add", str(tmp_path / "missing"), "--project", "p"]) != 0
    assert not root.exists() or list(root.iterdir()) == []
