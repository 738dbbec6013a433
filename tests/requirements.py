"""The components the suite needs (R55): under CI a missing or broken one FAILS the run and is
named; on a developer machine the tests that need it skip, with the reason.

"Under CI" is ``CI=true`` (GitHub and most CI services set it; ``.ci/run`` does) or
``ONNX_STUDIO_REQUIRE_ALL=1``; ``ONNX_STUDIO_REQUIRE_<KEY>=1`` makes one component required
(``ONNX_STUDIO_REQUIRE_BROWSER=1``: Chromium and Playwright).

Three layers use this module:

* ``python -m tests.requirements`` imports every component in this fresh interpreter and exits
  1 naming each one that is missing or broken (``tests/conftest.py`` runs it once at the start
  of a CI session, so the whole run fails before any test);
* :func:`require_module` / :func:`require` / :func:`require_engine` inside a test: fail under
  CI, skip otherwise;
* ``tests/conftest.py`` turns a skip from ``pytest.importorskip`` of a component named here into
  a failure under CI.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import NoReturn

__all__ = ["COMPONENTS", "Component", "chromium_path", "missing", "problems", "require", "require_engine", "require_module",
           "strict"]

DEV = "pip install -e '.[dev]'"
LITERT = "make test-deps (pip install -e '.[dev,litert]' and scripts/install_litert_converter.sh)"


@dataclass(frozen=True)
class Component:
    """One thing the suite needs: the modules it imports and/or the programs it runs."""

    key: str                          # ONNX_STUDIO_REQUIRE_<KEY>
    label: str
    modules: tuple[str, ...] = ()
    programs: tuple[str, ...] = ()
    install: str = DEV


COMPONENTS: tuple[Component, ...] = (
    Component("NNCF", "nncf", ("nncf",)),
    Component("DISTRIBUTED", "distributed (Dask)", ("distributed",)),
    Component("MNN", "MNN", ("MNN", "MNN.nn", "MNN.expr", "_tools")),
    Component("NCNN", "ncnn (and its converter pnnx)", ("ncnn",),
              install="make install (pip install ncnn; pip install --no-deps pnnx)"),
    Component("LITERT", "LiteRT runtime (ai_edge_litert)", ("ai_edge_litert", "ai_edge_litert.interpreter")),
    Component("LITERT_CONVERTER", "the LiteRT converter (onnx2tf, tf_keras, tensorflow)",
              ("tensorflow", "tf_keras", "onnx_graphsurgeon", "onnx2tf"), install=LITERT),
    Component("BROWSER", "Chromium and Playwright", ("playwright.sync_api",), ("chromium",),
              install="make test-deps (apt-get install chromium; pip install -e '.[dev]')"),
    Component("GRAPHVIZ", "graphviz (dot)", (), ("dot",), install="make test-deps (apt-get install graphviz)"),
    Component("SKIMAGE", "scikit-image", ("skimage.data",)),
    Component("TOKENIZERS", "tokenizers", ("tokenizers",)),
    Component("TRITONCLIENT", "tritonclient", ("tritonclient.grpc.model_config_pb2",)),
    Component("ONNXSIM", "onnxsim", ("onnxsim",)),
    Component("PSUTIL", "psutil", ("psutil",)),
    # the independent oracles of the metric tests (dev extra)
    Component("PYCOCOTOOLS", "pycocotools", ("pycocotools.cocoeval",)),
    Component("RAPIDFUZZ", "rapidfuzz", ("rapidfuzz.distance",)),
    Component("SCIPY", "scipy", ("scipy.stats",)),
)
_BY_MODULE = {m.split(".")[0]: c for c in COMPONENTS for m in c.modules}
_ENGINES = {"mnn": "MNN", "ncnn": "NCNN", "litert": "LITERT_CONVERTER", "openvino": None, "onnxruntime": None, "ort": None}


def strict(component: Component | None = None) -> bool:
    """True under CI (or when this component was made required): missing means failing."""
    env = os.environ
    if env.get("CI", "").strip().lower() in ("true", "1", "yes") or env.get("ONNX_STUDIO_REQUIRE_ALL") == "1":
        return True
    return component is not None and env.get(f"ONNX_STUDIO_REQUIRE_{component.key}") == "1"


def component_for_module(name: str) -> Component | None:
    return _BY_MODULE.get(name.split(".")[0])


def chromium_path() -> str | None:
    """Debian's chromium (or ONNX_STUDIO_CHROMIUM), driven by Playwright through ``executable_path``."""
    for cand in (os.environ.get("ONNX_STUDIO_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium",
                 shutil.which("chromium-browser")):
        if cand and Path(cand).exists():
            return cand
    return None


def _program(name: str) -> str | None:
    return chromium_path() if name == "chromium" else shutil.which(name)


def problem(component: Component) -> str | None:
    """Why ``component`` cannot be used here (the first failing import or program), or None."""
    for program in component.programs:
        if _program(program) is None:
            return f"{program} is not on PATH"
    for module in component.modules:
        try:
            importlib.import_module(module)
        except BaseException as exc:  # noqa: BLE001 - a broken install may raise anything, even SystemExit
            if isinstance(exc, KeyboardInterrupt):
                raise
            return f"import {module}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    return None


def message(component: Component, why: str) -> str:
    return f"required component {component.label} is missing or broken: {why} (install: {component.install})"


def problems(components: tuple[Component, ...] = COMPONENTS) -> list[str]:
    """One line per missing or broken component (empty: everything is here)."""
    out = []
    for c in components:
        why = problem(c)
        if why:
            out.append(message(c, why))
    return out


def missing(component: Component, why: str) -> NoReturn:
    """Fail the test under CI, skip it otherwise (also at module level); the reason names the component."""
    import pytest

    text = message(component, why)
    if strict(component):
        pytest.fail(f"CI: {text}", pytrace=False)
    pytest.skip(text, allow_module_level=True)


def _component(key_or_label: str) -> Component:
    for c in COMPONENTS:
        if key_or_label in (c.key, c.label) or key_or_label.upper() == c.key:
            return c
    raise KeyError(f"no required component {key_or_label!r} in tests/requirements.py")


def require(key: str) -> None:
    """The component (``"NNCF"``, ``"BROWSER"``, ...) works here, or the test fails (CI) / skips."""
    c = _component(key)
    why = problem(c)
    if why:
        missing(c, why)


def require_module(name: str) -> ModuleType:
    """``import name`` (a component's module), else fail under CI / skip with the reason."""
    c = component_for_module(name)
    if c is None:
        raise KeyError(f"{name!r} belongs to no required component in tests/requirements.py")
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - broken counts as missing
        missing(c, f"import {name}: {type(exc).__name__}: {exc}")


def require_engine(engine: str) -> None:
    """A studio engine that runs on this CPU is available, else fail under CI / skip. TensorRT is
    never required (no GPU here): callers skip it themselves."""
    from studio.core.engines import get_engine

    if engine not in _ENGINES:
        raise KeyError(f"{engine!r} is not an engine the suite requires (TensorRT: skip it explicitly)")
    availability = get_engine(engine).available()
    if availability.ok:
        return
    key = _ENGINES[engine]
    c = _component(key) if key else Component(engine.upper(), engine, (engine,))
    missing(c, str(availability.reason))


def main() -> int:
    found = problems()
    for line in found:
        print(line)
    if not found:
        print(f"all {len(COMPONENTS)} required components import and run here")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
