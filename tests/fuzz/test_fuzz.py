"""Mutation fuzzing (issue: no model can take the studio down). Each mutated
sample model goes through load -> inspect -> check (odd seeds: real ORT and
OpenVINO sessions in workers) or run (even seeds); every outcome
must be success or a clear StudioError. Anything else is a bug: its seed is
saved for replay.

Fast tier here (``ONNX_STUDIO_FUZZ_CASES``, default 300); ``make fuzz`` runs
1,000+. Replay one case: ``ONNX_STUDIO_FUZZ_SEED=<seed> pytest tests/fuzz``.
"""

from __future__ import annotations

import collections
import json
import os
import traceback
from pathlib import Path

import pytest

from sample_models.catalog import CATALOG
from studio import api
from studio.core.engines import RunOptions, get_engine
from studio.core.errors import StudioError
from studio.core.feeds import input_specs, random_feeds
from studio.core.sandbox import Limits
from tests.conftest import SAMPLES
from tests.fuzz.mutators import mutate

pytestmark = pytest.mark.fuzz

SOURCES = [m for m in CATALOG if not m.extra_files]      # single-file samples
LIMITS = Limits(timeout_s=10, memory_bytes=1 * 2**30)


def _cases() -> list[int]:
    if os.environ.get("ONNX_STUDIO_FUZZ_SEED"):
        return [int(os.environ["ONNX_STUDIO_FUZZ_SEED"])]
    return list(range(int(os.environ.get("ONNX_STUDIO_FUZZ_CASES", "300"))))


def _one_case(seed: int, folder: Path) -> str:
    """Run one case; return the outcome class ('ok' or an error code)."""
    sample = SOURCES[seed % len(SOURCES)]
    data, what = mutate((SAMPLES / sample.filename).read_bytes(), seed)
    path = folder / f"case{seed}.onnx"
    path.write_bytes(data)
    try:
        handle = api.load(path)
        summary = api.inspect(handle, pool_key="fuzz")
        feeds = random_feeds(input_specs(handle.proto), seed=seed)
        # Odd seeds: the compatibility check (real ORT session + OpenVINO convert/compile/run,
        # TensorRT table, lint) must turn every failure into findings. Even seeds: a plain ORT run.
        if seed % 2:
            report = api.check(handle, ("onnxruntime", "openvino", "tensorrt"), pool_key="fuzz")
            assert report.to_dict()
        else:   # its own pool: LIMITS (1 GiB) in the inspect/check pool (3 GiB) replaced the warm worker every case
            get_engine("ort").run(path, feeds, options=RunOptions(graph_optimization_level="basic"),
                                  limits=LIMITS, pool_key="fuzz-run")
        del summary
        return "ok"
    except StudioError as exc:
        msg = str(exc)
        assert "\n" not in msg and "Traceback" not in msg, msg
        return f"{exc.code}:{getattr(exc, 'kind', '')}".rstrip(":")
    finally:
        path.unlink(missing_ok=True)


# A case takes 0.2-3 s (a real ORT/OpenVINO session in a worker); the suite-wide 300 s timeout is for
# single tests, not for `make fuzz`'s 1,000 cases.
@pytest.mark.timeout(max(300, 5 * len(_cases())))
def test_fuzz_mutated_models(tmp_path):
    outcomes: collections.Counter[str] = collections.Counter()
    failures = []
    for seed in _cases():
        try:
            outcomes[_one_case(seed, tmp_path)] += 1
        except Exception as exc:   # not a StudioError: a bug to fix
            failures.append({"seed": seed, "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                             "trace": traceback.format_exc()[-1500:]})
    report = {"cases": sum(outcomes.values()) + len(failures), "outcomes": dict(outcomes.most_common()),
              "failures": failures}
    out = Path(os.environ.get("ONNX_STUDIO_ARTIFACTS", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    (out / "fuzz-report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "failures"}, indent=1))
    assert not failures, f"{len(failures)} unclean outcomes; replay with ONNX_STUDIO_FUZZ_SEED: " + \
        json.dumps(failures[:3], indent=1)
